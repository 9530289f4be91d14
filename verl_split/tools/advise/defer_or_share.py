"""Deferral, shared rollout or both: which ``verl-split advise`` recommends, each on the split that suits it best.

Both want the critic pool during generation. Together the critic pool joins generation when the critic's update
is done (:mod:`verl_split.tools.advise.late_join`), so the fastest ``+defer``, ``+shared`` and ``+shared+defer``
rows are compared, each against the fastest split with neither. Above ``candidates`` (it reads ranked
:class:`Candidate` rows), below ``advice``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.tools.advise.candidates import Candidate
from verl_split.tools.advise.late_join import break_even_push

DEFERRAL, SHARED, BOTH, NEITHER = "deferral", "shared rollout", "both", "neither"


@dataclass(frozen=True)
class Choice:
    """Deferral, shared rollout, both or neither for the job, each on the split that suits it best, and why."""

    use: str  # DEFERRAL, SHARED, BOTH or NEITHER
    reason: str
    defer_placement: str | None
    defer_saves_s: float  # against the fastest split with neither
    shared_placement: str | None
    shared_saves_s: float | None  # None: the push is not known (or no split holds replicas)
    shared_break_even_push_s: float | None  # shared rollout wins below this push, when the push is not known
    both_placement: str | None = None
    both_saves_s: float | None = None
    both_break_even_push_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "use": self.use,
            "reason": self.reason,
            "deferral_placement": self.defer_placement,
            "deferral_saves_s": self.defer_saves_s,
            "shared_rollout_placement": self.shared_placement,
            "shared_rollout_saves_s": self.shared_saves_s,
            "shared_rollout_wins_if_push_under_s": self.shared_break_even_push_s,
            "both_placement": self.both_placement,
            "both_saves_s": self.both_saves_s,
            "both_wins_if_push_under_s": self.both_break_even_push_s,
        }


def choose(everything: Sequence[Candidate]) -> Choice | None:
    """The fastest ``+defer``, ``+shared`` and ``+shared+defer`` rows, each one's saving against the fastest split
    with neither; a row whose push is not known is a lower bound, and its break-even push is said instead."""
    ordered = sorted(everything, key=lambda c: c.prediction.step_s)
    plain = next((c for c in ordered if c.is_split and not c.deferred and not c.shared_rollout), None)
    deferred = next((c for c in ordered if c.deferred and not c.shared_rollout), None)
    shared = next((c for c in ordered if c.shared_rollout and not c.deferred), None)
    both = next((c for c in ordered if c.both), None)
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
    if shared is None:
        use = DEFERRAL if defer_saves > 1e-9 else NEITHER
        reason = f"{what_defer}; no split's critic pool holds whole rollout replicas for shared rollout"
        return Choice(use, reason, defer_placement, defer_saves, None, None, None)
    # The step each would need to beat: the deferral's, or the plain split's.
    target = base - max(defer_saves, 0.0)
    shared_saves, shared_even, what_shared = _saving(shared, base, target, "shared rollout", "saves")
    if both is None:
        both_saves, both_even = None, None
        what_both = (
            "both together add nothing to shared rollout: no split that holds rollout replicas has a critic update "
            "longer than its actor update, so none runs on at the weight sync"
        )
    else:
        both_saves, both_even, what_both = _saving(both, base, target, "both together", "save")
        late = both.prediction.late
        assert late is not None
        what_both += ": the critic's update hides behind the actor pool's generation and " + (
            f"the critic pool joins {late.join_s:.2f} s{'' if both.ranked else ' plus the push'} into it"
            if late.joined
            else "the critic pool comes too late"
        )
    known = {DEFERRAL: defer_saves, SHARED: shared_saves, BOTH: both_saves}
    best, saves = max(((k, v) for k, v in known.items() if v is not None), key=lambda kv: kv[1])
    use = best if saves > 1e-9 else NEITHER
    reason = f"{what_defer}; {what_shared}; {what_both}"
    return Choice(
        use,
        reason,
        defer_placement,
        defer_saves,
        shared.placement,
        shared_saves,
        shared_even,
        None if both is None else both.placement,
        both_saves,
        both_even,
    )


def _saving(row: Candidate, base: float, target: float, what: str, verb: str) -> tuple[float | None, float | None, str]:
    """(saving, break-even push, words) of a row with shared rollout: its saving when its push is known, else
    the push under which it would beat ``target`` (the deferral's step, or the plain split's)."""
    step = row.prediction.step_s
    push = row.prediction.shared
    assert push is not None
    if row.ranked:
        saves = base - step
        return saves, None, f"{what} ({row.placement}) {verb} {saves:.2f} s with a {push.push_basis} push"
    late = row.prediction.late
    gap = break_even_push(late, target) if late is not None else target - step
    if gap <= 0:
        return None, None, f"{what} ({row.placement}) is slower even with a free push"
    words = (
        f"{what} ({row.placement}) beats it only with a weight push under {gap:.2f} s (not known; --push-s or "
        "--model-params)"
    )
    return None, gap, words
