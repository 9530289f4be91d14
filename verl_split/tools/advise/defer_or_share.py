"""Deferral or shared rollout: which of the two ``verl-split advise`` recommends, on the split that suits each.

Both want the critic pool during generation and do not add up (``deferral``'s docstring says why), so the fastest
``+defer`` row is compared with the fastest ``+shared`` row, each against the fastest split with neither. Above
``candidates`` (it reads ranked :class:`Candidate` rows), below ``advice``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.tools.advise.candidates import Candidate


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
