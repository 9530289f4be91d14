"""Shared rollout's load balancer: verl's, counting where requests go and able to hold the critic pool back.

Every request of a step goes through one balancer actor (verl's ``GlobalRequestLoadBalancer``: sticky
sessions, least in-flight requests first). verl-split starts it again with both pools' servers in it
(``coordinator.py``), as this subclass, which adds four things:

* **Counting**: requests routed per server since the last ``take_step`` (``split/critic_pool_rollout_share``),
  and the step's timing as the balancer saw it (first request, last release, when the critic pool opened).
* **Gating**, for a critic pool that joins generation late (``late_join.py``): its servers can be *parked*
  (routed nothing) and each open server can be given a *cap* of requests in flight. A request that finds
  no open server under its cap waits here, in the balancer, in a queue: the longest predicted first
  (``admission.py``; arrival order without predictions or under ``VERL_SPLIT_TAIL=verl``); a release hands its
  slot to the request at the queue's head (one waiter woken, not all), an opening server its slots to the
  next ones, each going to the least loaded open server with room. So the requests a late critic pool
  takes are the ones still queued when it opens, and none is ever routed to weights of another step.
  Without gating (every server open, no cap) routing is verl's own, request for request.
* **The floor**: each request's server, start and end in a ledger (``floor.py``), whence the step's generation
  floor in ``take_step``; and, for a migration on join (``migration.py``), the running requests and ``pin``.
* **Parking the dead**: a server the generation watchdog found dead or hung (``watchdog.py``) is routed nothing
  more, in any step (``park_dead``); and the watchdog asks which servers hold requests and have ended none for
  its limit (``stalled``).

The acquire waits, so the actor runs as a Ray async actor (``acquire_server`` / ``release_server`` are
coroutines; verl's clients await the first and send the second without waiting,
``verl/workers/rollout/llm_server.py`` ``LLMServerClient``), with room for every waiting request
(``MAX_CONCURRENCY``): a release must never queue behind the acquires it would free. Times are the
balancer's own clock (``time.monotonic``), reported as durations.

The trainer's own calls (the late join's decision and opening, the step's accounts, the watchdog's reads and
parking) run in a concurrency group of their own (``CONTROL``, declared where the actor class is made,
``actor_class``): Ray gives an async actor's group its own thread and event loop, so they answer while every request
slot is taken and thousands of acquires wait in the default group. Both threads touch the routing state, so every
read or change of it holds ``_lock`` (never across an await), and a slot handed out from the control thread reaches
its waiting acquire on the request loop (``_deliver``).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections import Counter
from typing import Any

import ray

# verl 0.9.1 moved the balancer to verl/workers/rollout/router.py (PR 7115) and re-exports it here
# (an import at llm_server.py's top); 0.9.0 and main@1dda039 define it here. Both keep its state in
# _servers, _inflight_requests and _request_id_to_server (read below).
from verl.workers.rollout.llm_server import GlobalRequestLoadBalancer

from verl_split.runtime.shared_rollout.admission import LONGEST_FIRST, AdmissionQueue
from verl_split.runtime.shared_rollout.floor import StepLedger
from verl_split.runtime.shared_rollout.late_join import recent_releases

# verl 0.8.0 defines it as a Ray actor class (@ray.remote, in llm_server.py), which Ray does not let a class
# inherit from: the plain class under it, the one 0.9 defines.
VerlBalancer: type = getattr(GlobalRequestLoadBalancer, "__ray_actor_class__", GlobalRequestLoadBalancer)

#: Concurrent calls the balancer actor takes: every request of a step may wait in acquire at once.
MAX_CONCURRENCY = 100_000
#: The concurrency group of the trainer's calls, apart from request traffic (module docstring); one at a time.
CONTROL = "control"
control = ray.method(concurrency_group=CONTROL)


class SharedRolloutBalancer(VerlBalancer):
    """verl's default load balancer with per-server counts, parked servers and caps (module docstring)."""

    def __init__(self, *args: Any, admission_order: str = LONGEST_FIRST, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Held by every read or change of the routing state: the control group's thread and the request loop's.
        self._lock = threading.Lock()
        self._routed: Counter[str] = Counter()
        self._parked: set[str] = set()
        self._caps: dict[str, int] = {}
        #: Requests waiting for a slot, each with the future its acquire awaits: the predicted longest first
        #: (``admission.py``; arrival order under ``VERL_SPLIT_TAIL=verl`` or with no prediction).
        self._waiting = AdmissionQueue(admission_order)
        #: Each request's prompt key, as its client gave it (``admission.py``): its length is learnt at its release.
        self._prompt_keys: dict[str, Any] = {}
        #: The step's requests (server, start, end): its generation floor (``floor.py``) and the migration's choice.
        self.ledger = StepLedger()
        #: Requests pinned to another server by a migration: the release of their aborted part teaches no length.
        self._moved: set[str] = set()
        #: When each request ended since the last take_step (their count is the step's releases): the late join's
        #: recent rate.
        self._release_times: list[float] = []
        #: CPU seconds of the actor's thread in this class's own routing (queueing, handing out, gating) since the
        #: last take_step: verl-split's cost on the request path, beside verl's own, counted as CPU time so that
        #: other processes on the machine do not inflate it (benchmarks/control_plane.py reads it).
        self._own_s = 0.0
        self._first_acquire: float | None = None
        self._last_release: float | None = None
        self._opened_after: float | None = None
        #: Servers the generation watchdog found dead or hung (``watchdog.py``): never routed to again, whatever
        #: the gate says.
        self._dead: set[str] = set()
        #: Per server, when it last ended a request, or took one while it held none: how long it has held its
        #: requests without ending any (``stalled``).
        self._progress: dict[str, float] = {}

    # -- what the trainer's side sets, once per step ------------------------------------------------
    @control
    def gate(self, parked: list[str], caps: dict[str, int]) -> None:
        """From now on route nothing to ``parked`` and at most ``caps[server]`` requests at once to each server."""
        with self._lock:
            self._parked, self._caps = set(parked), dict(caps)
            self._opened_after = None

    @control
    async def open(self, servers: list[str]) -> None:
        """Unpark ``servers``: queued requests may go there now."""
        with self._lock:
            self._parked -= set(servers)
            if self._opened_after is None:  # opened before the step's first request: there from the start
                self._opened_after = 0.0 if self._first_acquire is None else time.monotonic() - self._first_acquire
            self._hand_out()

    @control
    async def lift_caps(self) -> None:
        """No cap on any server; parked servers stay parked (a critic pool that sits the step out sleeps on)."""
        with self._lock:
            self._caps = {}
            self._hand_out()

    @control
    async def ungate(self) -> None:
        """Every server open, no cap: verl's own routing again (the queue drains at once)."""
        with self._lock:
            self._parked, self._caps = set(), {}
            self._hand_out()

    @control
    def park_dead(self, servers: list[str]) -> None:
        """Route nothing more to ``servers`` (found dead or hung), in every step from now on."""
        with self._lock:
            self._dead |= set(servers)

    @control
    def stalled(self, limit_s: float) -> dict[str, dict[str, float]]:
        """The servers that hold requests and have ended none for more than ``limit_s`` seconds: for each, the
        requests it holds and the seconds since it last ended one (or took its first)."""
        with self._lock:
            now = time.monotonic()
            return {
                sid: {"in_flight": n, "idle_s": now - self._progress[sid]}
                for sid, n in self._inflight_requests.items()
                if n > 0 and sid in self._progress and now - self._progress[sid] > limit_s
            }

    @control
    def running_requests(self) -> tuple[dict[str, tuple[str, float]], dict[str, int]]:
        """Per running request its server and start, and per server its requests in flight: what the migration
        chooses from (``migration.py``)."""
        with self._lock:
            running = {r: (self.ledger.server_of(r), t) for r, t in self.ledger.running().items()}
            return running, dict(self._inflight_requests)

    @control
    def pin(self, targets: dict[str, str]) -> None:
        """Send each request's next acquire to the server given (a migration's move: its resume goes there)."""
        with self._lock:
            for request_id, server in targets.items():
                self._request_id_to_server[request_id] = server
                self._moved.add(request_id)

    @control
    def progress(self) -> dict[str, Any]:
        """The step so far, for the late join's decision (``late_join.join_pays``): requests routed, ended and
        queued, seconds since the step's first request (None before it), and the recent rate: requests ended
        recently over the seconds they ended in (``late_join.recent_releases``)."""
        with self._lock:
            now = time.monotonic()
            since = None if self._first_acquire is None else now - self._first_acquire
            recent, recent_s = recent_releases(self._release_times, now, since)
            return {
                "routed": sum(self._routed.values()),
                "released": len(self._release_times),
                "queued": len(self._waiting),
                "since_first_s": since,
                "recent_released": recent,
                "recent_s": recent_s,
            }

    @control
    def take_step(self) -> dict[str, Any]:
        """What happened since the last call: requests per server, and the step's timing in seconds."""
        with self._lock:
            routed, self._routed = dict(self._routed), Counter()
            wall = None
            if self._first_acquire is not None and self._last_release is not None:
                wall = max(self._last_release - self._first_acquire, 0.0)
            floor = self.ledger.floor()
            step = {
                "routed": routed,
                "generation_s": wall,
                "opened_after_s": self._opened_after,
                "own_s": self._own_s,
                "floor": None if floor is None else floor.metrics(),
            }
            self._first_acquire = self._last_release = self._opened_after = None
            self.ledger = StepLedger()
            self._release_times = []
            self._own_s = 0.0
            return step

    @control
    def take_routed(self) -> dict[str, int]:
        """Requests routed per server since the last call, forgotten with the timing they started (a validation
        pass's). A critic pool that opened meanwhile is there from the next request on: it joined at 0 s."""
        with self._lock:
            routed, self._routed = dict(self._routed), Counter()
            self._first_acquire = self._last_release = None
            self._release_times = []
            self.ledger = StepLedger()
            if self._opened_after is not None:
                self._opened_after = 0.0
            return routed

    def learn_lengths(self, lengths: list[tuple[list[int], float]]) -> None:
        """Teach the admission order the lengths of prompts (each prompt's tokens and its length): a previous
        run's, so that its first step is ordered too (the control-plane benchmark's last epoch)."""
        with self._lock:
            for prompt_ids, length in lengths:
                self._waiting.predictor.finished(prompt_key({"prompt_ids": prompt_ids}), length)

    # -- verl's clients ------------------------------------------------------------------------
    def require_acquire_fields(self) -> list[str]:
        """verl 0.9.1's clients send these of ``generate``'s arguments with each acquire: the prompt, for the
        admission order's key (none under ``VERL_SPLIT_TAIL=verl``: nothing to serialize)."""
        return ["prompt_ids"] if self._waiting.order == LONGEST_FIRST else []

    def require_release_fields(self) -> list[str]:
        """verl 0.9.1's clients send the request id with each release: the ledger's end of it."""
        return ["request_id"]

    async def acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:
        key = prompt_key(extra)
        waiter: asyncio.Future | None = None
        with self._lock:
            if key is not None:
                self._prompt_keys[request_id] = key
            if not self._parked and not self._caps and not self._dead:
                chosen = super().acquire_server(request_id)
            else:
                started = time.thread_time()
                chosen = self._choose(request_id, queued_ahead=bool(self._waiting))
                if chosen is None:
                    waiter = asyncio.get_running_loop().create_future()
                    self._waiting.append(request_id, waiter, key)
                # else: room now and nobody queued before it, or a conversation's next turn
                self._own_s += time.thread_time() - started
        if waiter is not None:
            chosen = await waiter  # handed a slot by _hand_out, in admission order
        server_id, handle = chosen
        with self._lock:
            if self._first_acquire is None:
                self._first_acquire = time.monotonic()
            if self._inflight_requests[server_id] == 1:  # it held none: its time without ending one starts now
                self._progress[server_id] = time.monotonic()
            self._routed[server_id] += 1
            self.ledger.started(request_id, server_id, time.monotonic())
        return server_id, handle

    async def release_server(self, server_id: str, **extra: Any) -> None:
        with self._lock:
            self._release(server_id, extra)

    def _release(self, server_id: str, extra: dict[str, Any]) -> None:
        # verl 0.9.0's takes the server alone, 0.9.1's also a request id it ignores.
        VerlBalancer.release_server(self, server_id)
        self._last_release = self._progress[server_id] = time.monotonic()
        # verl 0.9.1's clients give the request id (``require_release_fields``): the ledger ends it (the floor),
        # and the time it held its server is its prompt's length for the admission order (``admission.py``).
        request_id = extra.get("request_id")
        if request_id is not None:
            self.ledger.ended(request_id, self._last_release, extra.get("response_tokens"))
            key = self._prompt_keys.pop(request_id, None)
            if request_id in self._moved:
                self._moved.discard(request_id)
            elif key is not None:
                self._waiting.finished(key, self.ledger.held_s(request_id))
        self._release_times.append(self._last_release)
        if self._waiting:
            self._hand_out(at_most=1)  # a release frees one slot: looking further would only scan for nothing

    # -- gated routing -------------------------------------------------------------------------
    def _hand_out(self, at_most: int | None = None) -> None:
        """Give the queued requests, first come first served, the slots there are now (``at_most`` of them); stop
        at the first that finds none. So a release costs O(servers), not O(queued x servers). Called holding
        ``_lock``."""
        started = time.thread_time()
        try:
            self._hand_out_now(at_most)
        finally:
            self._own_s += time.thread_time() - started

    def _hand_out_now(self, at_most: int | None) -> None:
        handed = 0
        while self._waiting and (at_most is None or handed < at_most):
            request_id, waiter = self._waiting.peek()
            if waiter.cancelled():  # its client gave up (an aborted generation): no slot for it
                self._waiting.popleft()
                continue
            if (chosen := self._choose(request_id)) is None:
                return
            self._waiting.popleft()
            self._deliver(waiter, chosen)
            handed += 1

    def _deliver(self, waiter: asyncio.Future, chosen: tuple[str, Any]) -> None:
        """Hand ``chosen`` (its slot counted already) to the acquire awaiting ``waiter``: at once on the request loop,
        through it from the control group's thread (an asyncio future is not thread-safe)."""
        loop = waiter.get_loop()
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # a plain method on the control group's thread: no loop running there
            here = None
        if here is loop:
            waiter.set_result(chosen)
        else:
            loop.call_soon_threadsafe(self._settle, waiter, chosen)

    def _settle(self, waiter: asyncio.Future, chosen: tuple[str, Any]) -> None:
        """On the request loop: the slot handed from the control thread, or back to the queue if its client gave up
        meanwhile (its acquire cancelled: nobody would release the slot)."""
        if not waiter.cancelled():
            waiter.set_result(chosen)
            return
        with self._lock:
            VerlBalancer.release_server(self, chosen[0])
            self._hand_out(at_most=1)

    def _choose(self, request_id: str, queued_ahead: bool = False) -> tuple[str, Any] | None:
        """verl's sticky + least-loaded choice among the open servers with room; None: wait (``queued_ahead``:
        others wait already, so only a sticky request may pass them)."""
        sticky = self._request_id_to_server.get(request_id)
        # A conversation's next turn stays on its server even past the cap (its prefix is cached there).
        if sticky in self._inflight_requests and sticky not in self._parked and sticky not in self._dead:
            self._inflight_requests[sticky] += 1
            return sticky, self._servers[sticky]
        if queued_ahead:
            return None
        if not self._inflight_requests:
            raise RuntimeError("No available servers in load balancer")
        # One pass over the servers: the least loaded among those open with room (ties broken at random, as verl's).
        least, candidates = None, []
        for sid, inflight in self._inflight_requests.items():
            if sid in self._parked or sid in self._dead or inflight >= self._caps.get(sid, inflight + 1):
                continue
            if least is None or inflight < least:
                least, candidates = inflight, [sid]
            elif inflight == least:
                candidates.append(sid)
        if not candidates:
            return None
        server_id = random.choice(candidates)
        self._request_id_to_server[request_id] = server_id
        self._inflight_requests[server_id] += 1
        return server_id, self._servers[server_id]


def actor_class() -> Any:
    """The Ray actor class a run starts the balancer as (``actor_class().remote(servers=...)``): Ray takes concurrency
    groups only here, not in ``.options()``, and refuses a method of a group the actor lacks."""
    return ray.remote(max_concurrency=MAX_CONCURRENCY, concurrency_groups={CONTROL: 1})(SharedRolloutBalancer)


def prompt_key(extra: dict[str, Any]) -> Any:
    """A request's prompt, as the admission order knows it: the key a client gave, or its prompt's tokens hashed
    (siblings of ``rollout.n`` share it, and the same prompt at its next epoch); None without either."""
    if (key := extra.get("prompt_key")) is not None:
        return key
    prompt_ids = extra.get("prompt_ids")
    return None if prompt_ids is None else hash(tuple(prompt_ids))


def caps_for_late_join(
    requests: int, hybrid: list[str], shared: list[str], reach: float, concurrency: int | None = None
) -> dict[str, int]:
    """In-flight caps for a step whose critic pool joins late.

    A server that batches (``concurrency``: vLLM's ``max_num_seqs``, or 1 for the CPU rollout, which generates
    one request at a time) is capped at what it runs at once plus one: more would only wait inside the server,
    where a late critic pool cannot take them; the one extra is ready when a request ends, so a server never
    idles for the balancer's round trip. Below that no server is held: a batching server with room runs another
    request at almost no cost to the others, so holding it back for a critic pool that may come later would
    lengthen the step. What the caps leave queued, the critic pool takes when it joins.

    With the servers' concurrency unknown, each actor-pool server takes ``ceil(requests / (H + reach * C))`` at
    once and refills as its requests end; ``reach`` (0 to 1) is how much of an even share the critic pool took in
    the last step (1 at first). The critic pool's servers, once open, take up to an even share each.
    """
    h, c = len(hybrid), len(shared)
    if concurrency:
        hybrid_cap = shared_cap = concurrency + 1
    else:
        hybrid_cap = max(1, math.ceil(requests / max(h + reach * c, 1e-9)))
        shared_cap = max(1, math.ceil(requests / max(h + c, 1)))
    return {**dict.fromkeys(hybrid, hybrid_cap), **dict.fromkeys(shared, shared_cap)}
