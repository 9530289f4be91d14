"""A stand-in rollout server that decodes like vLLM: per-token latency grows with its running batch; abort, resume.

Used by the control-plane benchmark's migrate arm and by the migration's test
(``tests/runtime/shared_rollout/test_migration_ray.py``), as a Ray actor in place of verl's vLLM server. It answers
what verl's clients call: ``generate(request_id, prompt_ids, sampling_params, ...)`` returning verl's
``TokenOutput``, ``abort_request(request_id, reset_prefix_cache)`` (verl's ``vLLMHttpServer.abort_request``) and a
weight version (the ``global_steps`` verl's servers tag their outputs with).

**The decode curve.** Time per output token (median) against concurrent requests, measured with vLLM 0.21.0 on
meta-llama/Llama-3.1-8B-Instruct (fp16) on one H100-80GB-HBM3: 6.48 ms at 1, 6.59 at 4, 10.94 at 16, 46.91 at 64
("Recipe: concurrency sweep", InferenceBench, https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/, run of
2026-05-16). Between the points linear; past 64, the throughput stays at its last measured value (per-token latency
grows in proportion to the batch: the engine is at its bandwidth). A step of decode costs ``t(batch)`` for every
running request at once. KV use is not modelled apart from the batch: the source varied only the concurrency.

**Tokens.** Deterministic: the ``i``-th token of a response to ``prompt_ids`` is a function of the prompt and ``i``
alone, and so is its log-prob; a response's length is ``sampling_params["length"]`` (the benchmark's drawn length),
capped by ``max_tokens``. So a request resumed elsewhere with its prefix ends with the very tokens it would have
had unmoved: what real vLLM does not promise (another server's sampling draws other random numbers), and what lets
the test check the prefix bit for bit.

**Held requests** (tests): with ``hold_at``, a request stops after that many tokens until :meth:`release_held` (or an
abort): the test moves requests while they are surely running, without a clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from bisect import bisect_right
from typing import Any

import ray

#: (concurrent requests, seconds per output token): the source in the module docstring.
DECODE_CURVE = ((1, 0.00648), (4, 0.00659), (16, 0.01094), (64, 0.04691))


def per_token_s(batch: int, scale: float = 1.0) -> float:
    """Seconds for one decode step of a server running ``batch`` requests (the curve, times ``scale``)."""
    batch = max(batch, 1)
    points = DECODE_CURVE
    if batch >= points[-1][0]:
        last_batch, last_s = points[-1]
        return scale * last_s * batch / last_batch
    i = bisect_right([b for b, _ in points], batch) - 1
    (b0, t0), (b1, t1) = points[i], points[i + 1]
    return scale * (t0 + (t1 - t0) * (batch - b0) / (b1 - b0))


def token_at(prompt_ids: list[int], position: int) -> tuple[int, float]:
    """The response's token at ``position`` and its log-prob: the prompt's and the position's alone."""
    value = zlib.crc32(f"{len(prompt_ids)}:{prompt_ids[:8]}:{prompt_ids[-1:]}:{position}".encode())
    return value % 32_000, -((value % 1000) / 1000.0)


class _Request:
    """One request on the server: its prompt, the tokens it came with (a resume's prefix) and its progress."""

    def __init__(self, prompt: list[int], prefix: int, want: int, done: asyncio.Future) -> None:
        self.prompt, self.prefix, self.want, self.done = prompt, prefix, want, done
        self.decoded = 0.0  # tokens decoded here (fractional between the loop's wake-ups)
        self.aborted = self.held = False

    @property
    def left(self) -> float:
        return self.want - self.prefix - self.decoded


@ray.remote(num_cpus=0)
class StandInDecodeServer:
    """One rollout server (module docstring). ``scale`` multiplies the curve (a benchmark's time scale).

    Continuous batching as processor sharing: every running request (not held) gains one token per ``t(batch)``
    seconds; one loop wakes at the next end, arrival, abort or release, so a step costs O(events x running)."""

    def __init__(
        self, name: str, scale: float = 1.0, hold_at: int | None = None, version: int = 0, max_num_seqs: int = 1 << 20
    ) -> None:
        self.name, self.scale, self.hold_at, self.version = name, scale, hold_at, version
        #: vLLM's ``max_num_seqs``: more requests than this wait, first come first served, inside the server.
        self._seats = asyncio.Semaphore(max_num_seqs)
        #: Per request part run here: (request id, start, end, tokens decoded here), as the floor's ledger reads it.
        self.log: list[tuple[str, float, float, int]] = []
        self._running: dict[str, _Request] = {}
        self._wake = asyncio.Event()
        self._loop: asyncio.Task | None = None
        #: Every generate call: (request id, the prompt it was given), in order; and the aborts it was asked for.
        self.calls: list[tuple[str, list[int]]] = []
        self.aborts: list[tuple[str, bool]] = []
        #: The largest batch it ran (the benchmark's check that the curve was exercised).
        self.peak_batch = 0

    def take_log(self) -> list[tuple[str, float, float, int]]:
        log, self.log = self.log, []
        self.peak_batch = 0
        return log

    def set_version(self, version: int) -> None:
        self.version = version

    def weights_version(self) -> int:
        return self.version

    def state(self) -> dict[str, Any]:
        return {
            "running": {r: int(q.decoded) for r, q in self._running.items()},
            "held": sorted(r for r, q in self._running.items() if q.held),
            "calls": list(self.calls),
            "aborts": list(self.aborts),
            "peak_batch": self.peak_batch,
        }

    def hold(self, at: int | None) -> None:
        """Hold each request after ``at`` tokens from now on (None: never)."""
        self.hold_at = at

    def release_held(self) -> None:
        self.hold_at = None
        for request in self._running.values():
            request.held = False
        self._wake.set()

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        self.aborts.append((request_id, reset_prefix_cache))
        request = self._running.get(request_id)
        if request is None:
            return {"aborted": False, "error": f"Request {request_id} not found"}
        request.aborted = True
        self._wake.set()
        return {"aborted": True, "request_id": request_id}

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append((request_id, list(prompt_ids)))
        # The original prompt's length travels in the sampling params (the benchmark's client sets it): a resumed
        # call's prompt is prompt + tokens so far, and its tokens continue from there.
        original = int(sampling_params.get("prompt_length", len(prompt_ids)))
        prompt, prefix = list(prompt_ids[:original]), len(prompt_ids) - original
        limit = prefix + int(sampling_params.get("max_tokens", 1 << 30))
        want = min(int(sampling_params.get("length", 16)), limit)
        request = _Request(prompt, prefix, want, asyncio.get_running_loop().create_future())
        async with self._seats:
            started = time.monotonic()
            self._running[request_id] = request
            if self._loop is None or self._loop.done():
                self._loop = asyncio.ensure_future(self._decode())
            self._wake.set()
            try:
                await request.done
            finally:
                self._running.pop(request_id, None)
        count = int(request.decoded)
        self.log.append((request_id, started, time.monotonic(), count))
        positions = range(prefix, prefix + count)
        with_ids = sampling_params.get("token_ids", True)  # the benchmark's 16k steps skip making the tokens
        pairs = [token_at(prompt, i) for i in positions] if with_ids else [(0, 0.0)] * count
        reason = "aborted" if request.aborted else ("length" if prefix + count >= limit else "completed")
        return TokenOutput(
            token_ids=[t for t, _ in pairs],
            log_probs=[p for _, p in pairs],
            stop_reason=reason,
            num_preempted=0,
            extra_fields={"global_steps": self.version, "server": self.name},
        )

    async def _decode(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while self._running:
            now = loop.time()
            active = [q for q in self._running.values() if not q.held and not q.done.done()]
            self.peak_batch = max(self.peak_batch, len(active))
            step_s = per_token_s(len(active), self.scale)
            for q in active:
                q.decoded = min(q.decoded + (now - last) / step_s, q.want - q.prefix)
                if q.aborted or q.left <= 1e-9:
                    q.decoded = float(int(q.decoded + 1e-9))
                    q.done.set_result(None)
                elif self.hold_at is not None and q.decoded >= self.hold_at:
                    q.decoded, q.held = float(self.hold_at), True
            last = now
            self._wake.clear()
            active = [q for q in self._running.values() if not q.held and not q.done.done()]
            if not active:
                await self._wake.wait()
                last = loop.time()
                continue
            step_s = per_token_s(len(active), self.scale)
            until = min(q.left if self.hold_at is None else min(q.left, self.hold_at - q.decoded) for q in active)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(until, 0.0) * step_s)
