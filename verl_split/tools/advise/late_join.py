"""Shared rollout and the deferred critic update together in ``verl-split advise``: the ``+shared+defer`` rows.

With ``VERL_SPLIT_SHARED_ROLLOUT=1`` and ``defer_critic`` in ``VERL_SPLIT_OVERLAP`` (the default) the critic
pool joins generation late (``runtime/shared_rollout/late_join.py``): after the actor's update of step k the
actor pool's replicas take the weights at once and step k+1's generation starts on them, while the critic
pool runs the rest of its update; then its replicas wake, take the weights pushed to them and the requests
still queued. For a split of A actor GPUs and C critic GPUs, times from generation's start::

    updates = T_ua(A)
    e       = max(0, T_uc(C) - T_ua(A))           the critic's excess: it runs on after the actor's update
    j       = max(0, e - T_sync) + T_push          the critic pool opens (the hybrid sync T_sync covers e first)
    gen     = T_gen(A)                             if T_gen(A) <= j: the critic pool never joins, and
    wait    = max(0, e - T_sync - T_gen(A))          what is left of its update is waited for before values
    gen     = j + (1 - j / T_gen(A)) x T_gen(A+C)  else: the rest of the work at both pools' rate
    step    = gen + prep(wait) + updates + fixed [+ the critic's offload and reload, when it joined]

The rates are the shared-rollout model's (:mod:`verl_split.tools.advise.shared`): N requests take T_gen(A) on
the actor pool and T_gen(A+C) on both, so the critic pool's own rate is N/T_gen(A+C) - N/T_gen(A) and by ``j``
the actor pool alone has done ``j / T_gen(A)`` of the work. The push is off the step's path (the critic pool
does it while the actor pool generates); the offload and reload are counted as ``+shared`` counts them, on the
path, when the critic pool joins. Where the critic's update is no longer than the actor's (``e = 0``) nothing
runs on at the sync: verl-split pushes and opens the critic pool before generation, as ``+shared`` alone, so
no such row is made. Not modelled: the actor-pool servers' caps while the critic pool is awaited (the balancer
leaves it a share queued), and the push's load on the actor pool's GPUs while they generate. A prediction
only, never measured on GPUs by us.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: The tag of the combined variant after its placement's name: ``+shared`` and ``+defer`` together.
TAG = "+shared+defer"
#: Seconds below which a bisection of the break-even push stops.
_TOLERANCE_S = 1e-6


@dataclass(frozen=True)
class LateJoin:
    """One split's step with both switches on: the inputs, and the schedule they give (module docstring)."""

    actor_update_s: float
    critic_update_s: float
    gen_alone_s: float  # T_gen(A): the actor pool alone
    gen_both_s: float  # T_gen(A+C): both pools from the start
    sync_s: float  # verl's weight sync of the actor pool's replicas, before generation starts
    push_s: float  # the push to the critic pool's replicas (0 when not known: the step is then a lower bound)
    offload_s: float  # the critic's offload and reload around generation, when it joins
    actor_prep_s: float
    critic_prep_s: float
    prep_overlap: bool
    fixed_s: float

    @property
    def excess_s(self) -> float:
        """The critic's update beyond the actor's: it runs on after the actor's update."""
        return max(0.0, self.critic_update_s - self.actor_update_s)

    @property
    def join_s(self) -> float:
        """When the critic pool would open, seconds after generation's start."""
        return max(0.0, self.excess_s - self.sync_s) + self.push_s

    @property
    def joined(self) -> bool:
        return self.gen_alone_s > self.join_s

    @property
    def gen_s(self) -> float:
        if not self.joined:
            return self.gen_alone_s
        j = self.join_s
        return j + (1.0 - j / self.gen_alone_s) * self.gen_both_s

    @property
    def wait_s(self) -> float:
        """What is left of the critic's update when generation ends, waited for before values."""
        return 0.0 if self.joined else max(0.0, self.excess_s - self.sync_s - self.gen_alone_s)

    @property
    def hidden_s(self) -> float:
        """The part of the critic's update behind the weight sync and the actor pool's generation."""
        return self.excess_s - self.wait_s

    @property
    def saved_s(self) -> float:
        """Generation's time saved against the actor pool alone."""
        return self.gen_alone_s - self.gen_s

    @property
    def critic_pool_share(self) -> float:
        """The share of the step's requests the critic pool generates (split/critic_pool_rollout_share)."""
        if not self.joined or self.gen_both_s <= 0:
            return 0.0
        return (self.gen_s - self.join_s) * (1.0 / self.gen_both_s - 1.0 / self.gen_alone_s)

    @property
    def prep_s(self) -> float:
        a, c, wait = self.actor_prep_s, self.critic_prep_s, self.wait_s
        return max(a, wait + c) if self.prep_overlap else max(a, wait) + c

    @property
    def added_s(self) -> float:
        """What shared rollout adds to the step's path: the offload and reload, when the critic pool joins."""
        return self.offload_s if self.joined else 0.0

    @property
    def step_s(self) -> float:
        return self.gen_s + self.prep_s + self.actor_update_s + self.fixed_s + self.added_s

    def with_push(self, push_s: float) -> LateJoin:
        return replace(self, push_s=push_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "critic_excess_s": self.excess_s,
            "join_s": self.join_s if self.joined else None,
            "critic_pool_joins": self.joined,
            "gen_actor_pool_alone_s": self.gen_alone_s,
            "gen_both_pools_s": self.gen_both_s,
            "gen_s": self.gen_s,
            "generation_saved_s": self.saved_s,
            "critic_pool_rollout_share": self.critic_pool_share,
            "critic_update_hidden_s": self.hidden_s,
            "critic_join_wait_s": self.wait_s,
            "push_s": self.push_s,
            "push_on_the_step_path": False,
        }


def break_even_push(late: LateJoin, target_s: float) -> float:
    """The push under which this step beats ``target_s`` (<= 0: not even with a free push).

    The step grows with the push while the critic pool still joins; once it would not (the push past
    ``T_gen(A)``) the step is the ``+defer`` row's, which the target is never slower than.
    """
    free = late.with_push(0.0)
    if free.step_s >= target_s:
        return target_s - free.step_s
    low, high = 0.0, max(late.gen_alone_s, _TOLERANCE_S)
    while high - low > _TOLERANCE_S:
        mid = (low + high) / 2
        if late.with_push(mid).step_s < target_s:
            low = mid
        else:
            high = mid
    return low


def describe(late: LateJoin, actor_gpus: int, critic_gpus: int) -> str:
    """Why the combination wins, in the model's terms: the critic's excess hides behind the actor pool's
    generation, and the critic pool generates for the rest of it."""
    hides = (
        f"the critic's update runs {late.excess_s:.2f} s past the actor's and hides behind the weight sync and the "
        f"actor pool's generation ({late.wait_s:.2f} s left to wait before values)"
    )
    if not late.joined:
        return (
            f"{hides}; generation ({late.gen_alone_s:.2f} s on the actor pool's {actor_gpus} GPUs) ends before the "
            f"critic pool could join at {late.join_s:.2f} s, so shared rollout adds nothing here"
        )
    return (
        f"{hides}, then the critic pool's {critic_gpus} GPUs join {late.join_s:.2f} s into generation (with a "
        f"weight push of {late.push_s:.2f} s, off the step's path) and generate about "
        f"{100 * late.critic_pool_share:.0f} % of it: generation takes {late.gen_s:.2f} s instead of "
        f"{late.gen_alone_s:.2f} s on the actor pool alone ({late.gen_both_s:.2f} s if both pools generated from "
        f"the start), for a critic offload and reload of {late.offload_s:.2f} s"
    )
