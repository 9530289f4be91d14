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
the two per split (:func:`choose`) and recommends the faster, or neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verl_split.advise.runs import SYNC_S, Run

if TYPE_CHECKING:
    from verl_split.advise.candidates import Candidate

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
            0.0,
            f"0 s: no run logged {SYNC_S} (verl before 0.8 syncs the weights inside generation, which covers it)",
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


@dataclass(frozen=True)
class Choice:
    """Deferral or shared rollout on one split, and why."""

    placement: str
    use: str  # "deferral", "shared rollout" or "neither"
    reason: str
    defer_saves_s: float
    shared_saves_s: float | None  # None: the push is not known
    shared_break_even_push_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "placement": self.placement,
            "use": self.use,
            "reason": self.reason,
            "deferral_saves_s": self.defer_saves_s,
            "shared_rollout_saves_s": self.shared_saves_s,
            "shared_rollout_wins_if_push_under_s": self.shared_break_even_push_s,
        }


def choose(everything: Sequence[Candidate]) -> Choice | None:
    """Deferral or shared rollout, on the fastest split: each one's saving against the same split without it."""
    splits = [c for c in everything if c.is_split and c.ranked]
    if not splits:
        return None
    best = splits[0]
    place = best.placement
    same = [c for c in everything if c.is_split and best.placement in (c.placement, *c.same_prediction_as)]
    base = next((c for c in same if not c.shared_rollout and not c.deferred), None)
    deferred = next((c for c in same if c.deferred), None)
    shared = next((c for c in same if c.shared_rollout), None)
    if base is None or deferred is None:
        return None
    step = base.prediction.step_s
    d = deferred.prediction.deferred
    assert d is not None
    defer_saves = step - deferred.prediction.step_s
    what_defer = (
        f"the deferral saves {defer_saves:.2f} s per step ({d.critic_update_s:.2f} s of critic update beside "
        f"{d.window_s:.2f} s of actor update, weight sync and generation; {d.excess_s:.2f} s left to wait before "
        "values)"
    )
    if shared is None:
        use = "deferral" if defer_saves > 1e-9 else "neither"
        return Choice(place, use, f"{what_defer}; shared rollout does not fit this split", defer_saves, None, None)
    if shared.ranked:
        shared_saves = step - shared.prediction.step_s
        what_shared = f"shared rollout saves {shared_saves:.2f} s ({shared.prediction.shared.push_basis} push)"
        if max(defer_saves, shared_saves) <= 1e-9:
            use = "neither"
        else:
            use = "deferral" if defer_saves >= shared_saves else "shared rollout"
        break_even = None
    else:
        shared_saves = None
        free = step - shared.prediction.step_s  # a lower bound: the push is not in it
        break_even = free - defer_saves if free > defer_saves else None
        what_shared = (
            f"shared rollout would beat it only with a weight push under {break_even:.2f} s (not known)"
            if break_even is not None
            else f"shared rollout saves at most {max(free, 0.0):.2f} s, even with a free push"
        )
        use = "deferral" if defer_saves > 1e-9 else "neither"
    both = "they do not add up: with shared rollout the deferred update is joined before the critic pool generates"
    return Choice(place, use, f"{what_defer}; {what_shared}; {both}", defer_saves, shared_saves, break_even)
