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

from verl_split.tools.advise.runs import SYNC_S, Run

if TYPE_CHECKING:
    from verl_split.tools.advise.candidates import Candidate

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


@dataclass(frozen=True)
class Choice:
    """Deferral or shared rollout for the job, each on the split that suits it best, and why."""

    use: str  # "deferral", "shared rollout" or "neither"
    reason: str
    defer_placement: str | None
    defer_saves_s: float  # against the fastest split with neither
    shared_placement: str | None
    shared_saves_s: float | None  # None: the push is not known (or no split holds replicas)
    shared_break_even_push_s: float | None  # shared rollout wins below this push, when the push is not known

    def to_json(self) -> dict[str, Any]:
        return {
            "use": self.use,
            "reason": self.reason,
            "deferral_placement": self.defer_placement,
            "deferral_saves_s": self.defer_saves_s,
            "shared_rollout_placement": self.shared_placement,
            "shared_rollout_saves_s": self.shared_saves_s,
            "shared_rollout_wins_if_push_under_s": self.shared_break_even_push_s,
        }


def choose(everything: Sequence[Candidate]) -> Choice | None:
    """Deferral or shared rollout: the fastest ``+defer`` row against the fastest ``+shared`` row, each one's
    saving against the fastest split with neither; a ``+shared`` row whose push is not known is a lower bound."""
    ordered = sorted(everything, key=lambda c: c.prediction.step_s)
    plain = next((c for c in ordered if c.is_split and not c.deferred and not c.shared_rollout), None)
    deferred = next((c for c in ordered if c.deferred), None)
    shared = next((c for c in ordered if c.shared_rollout), None)
    if plain is None:
        return None
    base = plain.prediction.step_s
    if deferred is None:
        defer_saves = 0.0
        what_defer = "the deferral saves nothing: no split's critic update outlasts its actor update"
    else:
        d = deferred.prediction.deferred
        assert d is not None
        defer_saves = base - deferred.prediction.step_s
        what_defer = (
            f"the deferral ({deferred.placement}) saves {defer_saves:.2f} s per step against {plain.placement} "
            f"without it ({d.critic_update_s:.2f} s of critic update beside {d.window_s:.2f} s of actor update, "
            f"weight sync and generation; {d.excess_s:.2f} s left to wait before values)"
        )
    defer_placement = None if deferred is None else deferred.placement
    both = "they do not add up: with shared rollout the deferred update is joined before the critic pool generates"
    if shared is None:
        use = "deferral" if defer_saves > 1e-9 else "neither"
        reason = f"{what_defer}; no split's critic pool holds whole rollout replicas for shared rollout"
        return Choice(use, reason, defer_placement, defer_saves, None, None, None)
    step = shared.prediction.step_s
    if shared.ranked:
        shared_saves: float | None = base - step
        assert shared.prediction.shared is not None
        what_shared = (
            f"shared rollout ({shared.placement}) saves {shared_saves:.2f} s with a "
            f"{shared.prediction.shared.push_basis} push"
        )
        use = "deferral" if defer_saves >= shared_saves else "shared rollout"
        use = use if max(defer_saves, shared_saves) > 1e-9 else "neither"
        break_even = None
    else:
        shared_saves = None
        gap = base - defer_saves - step  # the push under which shared rollout is the faster
        break_even = gap if gap > 0 else None
        what_shared = (
            f"shared rollout ({shared.placement}) beats it only with a weight push under {gap:.2f} s (not known; "
            "--push-s or --model-params)"
            if gap > 0
            else f"shared rollout ({shared.placement}) is slower even with a free push"
        )
        use = "deferral" if defer_saves > 1e-9 else "neither"
    reason = f"{what_defer}; {what_shared}; {both}"
    return Choice(use, reason, defer_placement, defer_saves, shared.placement, shared_saves, break_even)
