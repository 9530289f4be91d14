"""The control-plane benchmark's response lengths and its event model: what the servers alone would take.

Pure Python (no Ray): ``control_plane.py`` draws its requests and its model figures from here, and the late join's
rate model is checked against this event model in a unit test
(``tests/runtime/shared_rollout/test_join_pays_long_tail.py``).

**Lengths.** A lognormal, capped at ``max_response_length``, fitted to a published verl run: verl's maintainers'
PPO run of deepseek-llm-7b-chat on GSM8K (Megatron, 4 GPUs; ``tests/support/data/deepseek7b_megatron_ppo_4gpu.log``,
its source in ``tests/support/data/README.md``), step 1: ``response_length/mean`` 192.770, ``response_length/max``
512.000 (the run's ``max_response_length``: the cap), ``response_length/clip_ratio`` 0.013. Two figures fix the two
parameters: 1.3 % of the responses reach the cap (``P(X >= 512)``) and the capped mean is 192.77 tokens
(``E[min(X, 512)]``). The fit: median 172 tokens, sigma 0.49; the longest response is 2.66x the mean.

**The event model.** Each server runs ``slots`` requests at once (vLLM's ``max_num_seqs``), a request taking
``tokens / rate`` seconds whatever else runs (the stand-in servers' rule). Two ways of queueing:

* ``per_server``: verl's own routing with every request sent at once: each request goes to the server with the
  fewest in flight when it arrives (so, all arriving together, round robin) and waits in that server's own queue;
* ``shared_queue``: verl-split's gate under the late join: the actor pool's servers capped at what they run at
  once, the rest waiting in the balancer, first come first served, for the first slot that frees on any open
  server; the critic pool's servers open at ``opened_after`` seconds.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from statistics import NormalDist

from verl_split.runtime.shared_rollout.late_join import recent_releases

#: The published run's step 1 (module docstring).
PUBLISHED_MEAN_TOKENS = 192.770
PUBLISHED_MAX_TOKENS = 512
PUBLISHED_CLIP_RATIO = 0.013


@dataclass(frozen=True)
class LogNormal:
    """A lognormal of ``mu`` and ``sigma`` (of the log), capped at ``cap``."""

    mu: float
    sigma: float
    cap: float

    def capped_mean(self) -> float:
        """``E[min(X, cap)]``."""
        unit = NormalDist()
        z = (math.log(self.cap) - self.mu) / self.sigma
        below = math.exp(self.mu + self.sigma**2 / 2) * unit.cdf(z - self.sigma)
        return below + self.cap * (1 - unit.cdf(z))

    def draw(self, count: int, seed: int) -> list[float]:
        rng = random.Random(seed)
        return [min(rng.lognormvariate(self.mu, self.sigma), self.cap) for _ in range(count)]


def fit_lognormal(mean: float, cap: float, clip_ratio: float) -> LogNormal:
    """The lognormal whose share at or above ``cap`` is ``clip_ratio`` and whose capped mean is ``mean``.

    The share fixes ``mu`` for each ``sigma`` (``ln cap = mu + z sigma``, ``z`` the standard normal's quantile at
    ``1 - clip_ratio``); the capped mean falls as ``sigma`` grows there, so one ``sigma`` matches it (bisection)."""
    if not 0 < clip_ratio < 0.5 or not 0 < mean < cap:
        raise ValueError(f"no lognormal has a capped mean {mean} below the cap {cap} with {clip_ratio} at the cap")
    z = NormalDist().inv_cdf(1 - clip_ratio)

    def at(sigma: float) -> LogNormal:
        return LogNormal(math.log(cap) - z * sigma, sigma, cap)

    low, high = 1e-6, 5.0
    for _ in range(200):
        middle = (low + high) / 2
        if at(middle).capped_mean() > mean:
            low = middle
        else:
            high = middle
    return at((low + high) / 2)


#: The benchmark's response lengths (module docstring).
PUBLISHED_LENGTHS = fit_lognormal(PUBLISHED_MEAN_TOKENS, PUBLISHED_MAX_TOKENS, PUBLISHED_CLIP_RATIO)


@dataclass(frozen=True)
class Schedule:
    """When each request started and ended (seconds from the step's first request), and on which pool."""

    starts: list[float]
    ends: list[float]
    on_critic_pool: list[bool]

    @property
    def generation_s(self) -> float:
        return max(self.ends, default=0.0)

    @property
    def critic_pool_share(self) -> float:
        return sum(self.on_critic_pool) / max(len(self.on_critic_pool), 1)

    @cached_property
    def _sorted_starts(self) -> list[float]:
        return sorted(self.starts)

    @cached_property
    def _sorted_ends(self) -> list[float]:
        return sorted(self.ends)

    def queued_at(self, t: float) -> int:
        """Requests not started by ``t`` (waiting for a slot)."""
        return len(self.starts) - bisect_right(self._sorted_starts, t)

    def progress_at(self, t: float) -> dict[str, float | int | None]:
        """What the balancer's ``progress`` reports at ``t``, every request having arrived at 0: requests routed
        (started), ended and queued, seconds since the first, and the recent rate by the balancer's own rule."""
        released = bisect_right(self._sorted_ends, t)
        routed = bisect_right(self._sorted_starts, t)
        recent, recent_s = recent_releases(self._sorted_ends[:released], t, t)
        return {
            "routed": routed,
            "released": released,
            "queued": len(self.starts) - routed,
            "since_first_s": t,
            "recent_released": recent,
            "recent_s": recent_s,
        }


def shared_queue(
    durations: list[float], hybrid_slots: int, shared_slots: int = 0, opened_after: float | None = None
) -> Schedule:
    """Every request queued at 0, first come first served, on ``hybrid_slots`` from the start and ``shared_slots``
    more from ``opened_after`` (never when None)."""
    free = [(0.0, False)] * hybrid_slots
    if opened_after is not None:
        free += [(opened_after, True)] * shared_slots
    heapq.heapify(free)
    starts, ends, pools = [], [], []
    for duration in durations:
        start, critic = heapq.heappop(free)
        starts.append(start)
        ends.append(start + duration)
        pools.append(critic)
        heapq.heappush(free, (start + duration, critic))
    return Schedule(starts, ends, pools)


def per_server(durations: list[float], servers: int, slots: int, critic_servers: int = 0) -> Schedule:
    """verl's routing of requests that all arrive at once: round robin over ``servers`` (the fewest in flight),
    each server running its own queue on ``slots``; the last ``critic_servers`` of them on the critic pool."""
    queues: list[list[float]] = [[] for _ in range(servers)]
    for i, duration in enumerate(durations):
        queues[i % servers].append(duration)
    starts, ends, pools = [0.0] * len(durations), [0.0] * len(durations), [False] * len(durations)
    for server, mine in enumerate(queues):
        one = shared_queue(mine, slots)
        for k, (start, end) in enumerate(zip(one.starts, one.ends, strict=True)):
            i = server + k * servers
            starts[i], ends[i], pools[i] = start, end, server >= servers - critic_servers
    return Schedule(starts, ends, pools)
