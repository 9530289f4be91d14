"""Values streamed into generation's tail: what does not depend on the trainer.

Under split placement the critic's pool idles while the actor's pool generates. Most samples finish long
before the last one, and a sample's values depend only on its own tokens and the critic's weights, which are
step k's once the deferred critic update of step k-1 has been joined. So the critic's pool can value finished
samples, a micro-batch at a time, while the rest still generate; the step's stock ``values`` call then
dispatches only the samples not yet valued (the trainer's own module: ``stream_values_v1.py`` for verl's v1
trainer).

Here, for every trainer:

* ``why_not_exact``: the exactness gate. The critic's forward computes a sample alone only when its
  micro-batches are one sample each and not cut by token budget; then a sample valued early is valued by the
  very computation the stock call would run (same shapes, same kernels), bit for bit. Anywhere else the
  micro-batch a sample lands in depends on the whole batch (padding to its longest sample, or packing by
  tokens), so streaming steps aside there.
* ``plan_chunk``: which finished samples the next micro-batch takes (whole rows for every data-parallel rank).
* ``StreamStep``: one step's streamed samples and times, and its ``split/stream_*`` metrics.
* ``stepped_aside``: the one log line and the metric of a step that does not stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_split.core import log
from verl_split.core import metric_names as names
from verl_split.core.errors import PrepFailedError

logger = logging.getLogger("verl_split.stream_values")


def why_not_exact(engine_config: Any) -> str:
    """Empty when the critic's values forward runs each sample alone (a streamed sample is then valued bit for
    bit as the stock call values it), else why not, naming the keys that would make it so.

    ``engine_config`` is the critic engine's config as verl's workers read it (``CriticConfig.engine``:
    ``use_dynamic_bsz``, ``infer_micro_batch_size_per_gpu``; verl/workers/engine_workers.py ``infer_batch``).
    """
    dynamic = getattr(engine_config, "use_dynamic_bsz", True)
    micro = getattr(engine_config, "infer_micro_batch_size_per_gpu", None)
    if not dynamic and micro == 1:
        return ""
    what = "packs its micro-batches by tokens (use_dynamic_bsz)" if dynamic else f"forwards {micro} samples at once"
    return (
        f"the critic's values forward {what}, so a sample's micro-batch depends on the whole batch and values "
        "computed early would differ in the last bits; set critic.<engine>.use_dynamic_bsz=false and "
        "critic.<engine>.infer_micro_batch_size_per_gpu=1 (e.g. critic.fsdp.*) for exact streamed values"
    )


def plan_chunk(finished: Sequence[str], data_parallel: int) -> list[str]:
    """The finished samples the next streamed micro-batch takes: as many as give every data-parallel rank of the
    critic the same number of rows (verl splits a batch into equal contiguous parts per rank), in the order they
    finished; empty while fewer than one per rank are waiting."""
    if data_parallel < 1:
        raise ValueError(f"data_parallel must be at least 1, not {data_parallel}")
    return list(finished[: len(finished) - len(finished) % data_parallel])


@dataclass
class StreamStep:
    """One step's streamed values: which samples were valued while generation ran, and when."""

    global_step: int
    critic_pool: str | None
    actor_pool: str | None
    streamed: list[str] = field(default_factory=list)  # sample keys valued by the stream, in dispatch order
    streamed_set: set[str] = field(default_factory=set)
    busy_s: float = 0.0  # the stream's micro-batches, dispatch to result, summed
    first_start: float = 0.0
    generation_end: float = 0.0  # when the trainer saw generation end (0: not yet)
    covered: int = 0  # samples valued before generation ended
    after_generation_s: float = 0.0  # values' time on the step's path after generation
    batch_size: int = 0  # the samples of the step's stock values call
    failure: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, keys: Iterable[str], started: float, ended: float) -> None:
        keys = list(keys)
        with self.lock:
            self.streamed.extend(keys)
            self.streamed_set.update(keys)
            self.busy_s += ended - started
            self.first_start = self.first_start or started
            if not self.generation_end:
                self.covered = len(self.streamed)

    def generation_ended(self) -> None:
        with self.lock:
            if not self.generation_end:
                self.generation_end = time.monotonic()
                self.covered = len(self.streamed)

    def rest(self, keys: Sequence[str]) -> list[int]:
        """Indices into ``keys`` (the stock call's batch) of the samples the stream has not valued."""
        return [i for i, key in enumerate(keys) if key not in self.streamed_set]

    def failed(self, exc: BaseException) -> None:
        self.failure = self.failure or exc
        self.stop.set()

    def failure_error(self) -> BaseException:
        """The error the trainer raises for a failed stream: the deferred update's names itself."""
        exc = self.failure
        if isinstance(exc, PrepFailedError) or type(exc).__name__ == "UpdateFailedError":
            return exc
        return PrepFailedError(
            f"the critic's streamed values failed on resource pool {self.critic_pool!r} (step {self.global_step}) "
            f"while the actor pool {self.actor_pool!r} generated: {type(exc).__name__}: {exc}. The run stops here; "
            "its last checkpoint is intact. To value the batch after generation instead, rerun with "
            "VERL_SPLIT_STREAM_VALUES=off."
        )

    def metrics(self) -> dict[str, float]:
        coverage = self.covered / self.batch_size if self.batch_size else 0.0
        return {
            names.STREAM_VALUES_S: self.busy_s,
            names.STREAM_COVERAGE: min(coverage, 1.0),
            names.VALUES_AFTER_GEN_S: self.after_generation_s,
            names.STREAM_VALUES_OFF: 0.0,
        }


def stepped_aside(reason: str, after_generation_s: float = 0.0) -> dict[str, float]:
    """A step that does not stream: one log line (once per reason) and its metrics; all of values is after
    generation."""
    log.once(logger, f"Values are not streamed into generation's tail: {reason}.")
    return {
        names.STREAM_VALUES_OFF: 1.0,
        names.STREAM_COVERAGE: 0.0,
        names.STREAM_VALUES_S: 0.0,
        names.VALUES_AFTER_GEN_S: after_generation_s,
    }
