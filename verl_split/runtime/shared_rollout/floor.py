"""Generation's floor: how short a step's generation could have been under any routing of the same requests.

A step's generation can end no earlier than two bounds (Graham's list-scheduling bound, in both its halves):

* **the tail**: the longest-running request's own time, start to end, at the batch it ran in. Routing decides when
  it starts, not how long it takes once running; only a lower per-token latency (a smaller batch on its server,
  which moving it does, or a faster engine) shortens it;
* **the work**: every token the step generated over what the servers can generate together, each at the rate it
  kept while it had requests.

So ``generation_s / max(tail, work) - 1`` is how far routing (the late join, longest-first admission) could still
shorten the step; near 0 with the tail the larger, only moving the longest request to a quieter server (or a faster
engine) can. :func:`advice` says which.

The ledger is what the balancer sees anyway (a request's server, start and end, and its tokens when the client
reports them), kept as flat lists: two events a request, about 2 MB at 16k requests; the floor is one sort of the
events (``O(n log n)``, about 50 ms at 16k in CPython). Standard library only: ``advise`` and the benchmark use it
without Ray. Times are the caller's clock (``time.monotonic``), reported as durations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_split.core import metric_names as names

#: Within this share of its floor a step's generation is at the floor: what is left is measurement noise and the
#: balancer's round trip, nothing a routing change wins back.
AT_FLOOR = 0.05
#: Advice: migrate when the longest request ran at a batch at least this many times the joiners' (a small batch
#: decodes faster per token only once the batch is well past the engine's knee: about 8 to 16 on the curves cited in
#: ``benchmarks/control_plane_server.py``).
MIGRATE_BATCH_RATIO = 4.0


@dataclass(frozen=True)
class Floor:
    """One step's generation against its floor (module docstring)."""

    generation_s: float
    tail_s: float
    work_s: float
    #: The longest-running request's mean running batch on its server while it ran.
    tail_batch: float
    #: Its tokens, when the clients reported them (None otherwise).
    tail_tokens: int | None
    requests: int
    servers: int

    @property
    def floor_s(self) -> float:
        return max(self.tail_s, self.work_s)

    @property
    def over_floor(self) -> float:
        """``generation_s / floor_s - 1``: 0 at the floor."""
        return self.generation_s / self.floor_s - 1 if self.floor_s > 0 else 0.0

    @property
    def tail_bound(self) -> bool:
        return self.tail_s >= self.work_s

    def metrics(self) -> dict[str, float]:
        return {
            names.GENERATION_FLOOR_S: self.floor_s,
            names.GENERATION_TAIL_FLOOR_S: self.tail_s,
            names.GENERATION_WORK_FLOOR_S: self.work_s,
            names.GENERATION_OVER_FLOOR: self.over_floor,
            names.GENERATION_TAIL_BATCH: self.tail_batch,
        }


class StepLedger:
    """Per request its server, start, first token and end; per server its running batch over time (from those)."""

    def __init__(self) -> None:
        self._server: dict[str, str] = {}
        self._start: dict[str, float] = {}
        self._first_token: dict[str, float] = {}
        self._end: dict[str, float] = {}
        self._tokens: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._start)

    def started(self, request_id: str, server: str, at: float) -> None:
        """``request_id`` began on ``server`` at ``at``. A resumed request (moved, or a later turn) begins again:
        its earlier part's end is where the new part starts, so its time counts once."""
        if request_id in self._start and request_id in self._end:
            self._end.pop(request_id)
        else:
            self._start[request_id] = at
        self._server[request_id] = server

    def first_token(self, request_id: str, at: float) -> None:
        self._first_token.setdefault(request_id, at)

    def ended(self, request_id: str, at: float, tokens: int | None = None) -> None:
        if request_id not in self._start:
            return  # began before the ledger was reset: not this step's
        self._end[request_id] = at
        if tokens is not None:
            self._tokens[request_id] = tokens

    def held_s(self, request_id: str) -> float:
        """Seconds ``request_id`` held its server(s), start to end (0 for one not ended)."""
        if request_id not in self._end:
            return 0.0
        return self._end[request_id] - self._start[request_id]

    def running(self) -> dict[str, float]:
        """The requests begun and not ended, with when they began (the migration's candidates)."""
        return {r: t for r, t in self._start.items() if r not in self._end}

    def server_of(self, request_id: str) -> str | None:
        return self._server.get(request_id)

    def floor(self, default_tokens_per_s: float | None = None) -> Floor | None:
        """The step's floor from the requests that ended; None before any did.

        A server's rate is its tokens over the time it held requests; with no token counts reported, each request
        counts as one unit of work and the rate is requests per second (the work bound is then exact only for
        requests of equal length: it says so by being the smaller bound)."""
        done = [r for r in self._end if r in self._start]
        if not done:
            return None
        first = min(self._start[r] for r in done)
        last = max(self._end[r] for r in done)
        longest = max(done, key=lambda r: self._end[r] - self._start[r])
        busy, batch_at = self._busy_and_batches(done, longest)
        work: dict[str, float] = {}
        for r in done:
            work[self._server[r]] = work.get(self._server[r], 0.0) + self._tokens.get(r, 1)
        capacity = sum(work[s] / busy[s] for s in work if busy.get(s, 0.0) > 0)
        if capacity <= 0 and default_tokens_per_s:
            capacity = default_tokens_per_s * len(work)
        return Floor(
            generation_s=last - first,
            tail_s=self._end[longest] - self._start[longest],
            work_s=sum(work.values()) / capacity if capacity > 0 else 0.0,
            tail_batch=batch_at,
            tail_tokens=self._tokens.get(longest),
            requests=len(done),
            servers=len(work),
        )

    def _busy_and_batches(self, done: list[str], longest: str) -> tuple[dict[str, float], float]:
        """Per server the seconds it held at least one request; and the longest request's mean running batch (its
        server's requests in flight, time-weighted over its own run). One sweep over the sorted events."""
        events: dict[str, list[tuple[float, int]]] = {}
        for r in done:
            events.setdefault(self._server[r], []).extend(((self._start[r], 1), (self._end[r], -1)))
        busy: dict[str, float] = {}
        tail_server, (t0, t1) = self._server[longest], (self._start[longest], self._end[longest])
        weighted = 0.0
        for server, marks in events.items():
            marks.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
            running, since, held = 0, marks[0][0], 0.0
            for at, delta in marks:
                if running > 0:
                    held += at - since
                    if server == tail_server:
                        overlap = min(at, t1) - max(since, t0)
                        if overlap > 0:
                            weighted += running * overlap
                running, since = running + delta, at
            busy[server] = held
        return busy, weighted / (t1 - t0) if t1 > t0 else 1.0


@dataclass(frozen=True)
class Advice:
    """What can shorten the next step's generation: ``join``, ``migrate`` or ``nothing``, and why."""

    action: str
    why: str


def advice(floor: Floor, joiner_batch: float = 1.0, at_floor: float = AT_FLOOR) -> Advice:
    """The decision the floor supports (module docstring). At a tail floor: migrate when the longest request ran at
    a large batch, else nothing (no routing, join or move shortens it). Otherwise join: the step is above its floor
    (a better order or more servers win it back) or at its work floor (more servers raise the capacity)."""
    if floor.tail_bound and floor.over_floor <= at_floor:
        if floor.tail_batch >= MIGRATE_BATCH_RATIO * max(joiner_batch, 1.0):
            return Advice(
                "migrate",
                f"generation is at its tail floor: its longest request ran {floor.tail_s:.1f}s at a batch of "
                f"{floor.tail_batch:.0f}; moved to a joining server it decodes at a batch of about {joiner_batch:.0f}",
            )
        return Advice(
            "nothing",
            f"generation {floor.generation_s:.1f}s is at its floor (its longest request's own time at a batch of "
            f"{floor.tail_batch:.0f}, {floor.tail_s:.1f}s): no routing, join or move shortens it; only a faster "
            "engine or shorter responses do",
        )
    if floor.over_floor > at_floor:
        why = f"is {floor.over_floor:.0%} over its floor {floor.floor_s:.1f}s: a better order or more servers win it"
    else:
        why = f"is at its work floor {floor.work_s:.1f}s: more servers raise the capacity that bounds it"
    return Advice("join", f"generation {floor.generation_s:.1f}s {why}")


def floor_from_metrics(metrics: dict[str, Any]) -> Floor | None:
    """A step's floor from its logged ``split/generation_*`` figures (what ``advise`` reads), or None without them."""
    keys = (names.GENERATION_TAIL_FLOOR_S, names.GENERATION_WORK_FLOOR_S, names.GENERATION_OVER_FLOOR)
    if any(metrics.get(k) is None for k in keys):
        return None
    tail, work = float(metrics[keys[0]]), float(metrics[keys[1]])
    return Floor(
        generation_s=max(tail, work) * (1 + float(metrics[keys[2]])),
        tail_s=tail,
        work_s=work,
        tail_batch=float(metrics.get(names.GENERATION_TAIL_BATCH) or 1.0),
        tail_tokens=None,
        requests=0,
        servers=0,
    )
