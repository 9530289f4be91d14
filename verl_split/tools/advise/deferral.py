"""The deferred critic update in ``verl-split advise`` (``defer_critic`` in ``VERL_SPLIT_OVERLAP``, issue 22).

Under split placement nothing of step k+1 before its ``values`` needs the critic: generation needs only the actor
and its weight sync. With the deferral the critic's update of step k is dispatched beside the actor's update and
left running while the actor pool updates, syncs the weights and generates step k+1; it is joined at step k+1's
first critic call, ``values`` (with the preparation overlap, values starts at old_log_prob's entry). So, for a
split of A actor GPUs and C critic GPUs::

    updates = T_ua(A)                                           (was max(T_ua(A), T_uc(C)))
    excess  = max(0, T_uc(C) - (T_ua(A) + T_sync + T_gen(A)))   the part of the critic's update that does not hide
    prep    = max(T_old+ref(A), excess + T_val(C))              with the preparation overlap
            = max(T_old+ref(A), excess) + T_val(C)              without it (values waits after old_log_prob + ref)

``T_sync`` is verl's weight sync (``timing_s/update_weights``, 0.8 and later; earlier releases sync inside
generation, which then covers it). Other work between the update and values (reward, balancing) is not counted
as cover: the model errs towards less hiding.

Deferral and shared rollout (``+shared``) both want the critic pool during generation. With shared rollout the
deferred update is joined before the critic pool's rollout replicas wake, so it hides nothing behind generation:
the pair behaves as the update overlap with shared rollout, i.e. as ``+shared`` alone. advise therefore compares
the two per split (:func:`verl_split.tools.advise.defer_or_share.choose`) and recommends the faster, or neither.

This module is the model's arithmetic, below ``model`` and ``candidates``; the comparison of ranked candidates
sits above them, in ``defer_or_share``, so the imports run one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.tools.advise.runs import SYNC_S, Run

#: The tag of a deferral variant after its placement's name, and the phase that switches it on.
TAG = "+defer"
PHASE = "defer_critic"
OVERLAP_VALUE = "updates,prep,defer_critic"


@dataclass(frozen=True)
class DeferralCosts:
    """What the model needs beyond the lanes: the weight sync the deferred update hides behind, and its source."""

    sync_s: float
    sync_source: str

    def to_json(self) -> dict[str, Any]:
        return {"sync_s": self.sync_s, "sync_source": self.sync_source}


@dataclass(frozen=True)
class DeferredCritic:
    """One layout's deferred critic update: what covers it, what hides, what stays on the step's path."""

    critic_update_s: float
    window_s: float  # T_ua + T_sync + T_gen: the actor pool's work the update runs beside
    excess_s: float  # waited for before values
    hidden_s: float  # the part after the actor's update, behind the sync and the next generation

    def to_json(self) -> dict[str, float]:
        return {
            "critic_update_s": self.critic_update_s,
            "window_s": self.window_s,
            "excess_s": self.excess_s,
            "hidden_s": self.hidden_s,
        }


def deferral_costs(runs: Sequence[Run]) -> DeferralCosts:
    """The weight sync: the runs' ``timing_s/update_weights`` (less any shared-rollout push), mean over steps."""
    spreads = [run.sync for run in runs if run.sync is not None]
    steps = sum(spread.n for spread in spreads)
    if not steps:
        return DeferralCosts(
            0.0, f"no run logged {SYNC_S}; verl before 0.8 syncs the weights inside generation, which covers it"
        )
    mean = sum(spread.mean * spread.n for spread in spreads) / steps
    return DeferralCosts(mean, f"{SYNC_S}, mean over {steps} steps")


def defer(
    actor_update: float,
    critic_update: float,
    gen: float,
    sync: float,
    actor_prep: float,
    critic_prep: float,
    prep: bool,
) -> tuple[float, float, DeferredCritic]:
    """(preparation, updates, the deferred update's parts) of one split step with the critic's update deferred."""
    window = actor_update + sync + gen
    excess = max(0.0, critic_update - window)
    hidden = min(max(critic_update - actor_update, 0.0), sync + gen)
    preparation = max(actor_prep, excess + critic_prep) if prep else max(actor_prep, excess) + critic_prep
    return preparation, actor_update, DeferredCritic(critic_update, window, excess, hidden)
