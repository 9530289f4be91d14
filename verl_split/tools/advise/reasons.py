"""Why ``verl-split advise`` recommends what it does, in the model's own terms; above ``candidates`` (it reads
ranked rows), below ``advice``.

* ``reason``: why the first candidate, in one sentence; ``caveat``: a note when the runner-up is too close to call.
* ``choose``: deferral, shared rollout or both for the job, each on the split that suits it best. Both want the
  critic pool during generation; together the critic pool joins generation when the critic's update is done
  (:class:`verl_split.tools.advise.variants.LateJoinStep`), so the fastest ``+defer``, ``+shared`` and
  ``+shared+defer`` rows are compared, each against the fastest split with neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.tools.advise.candidates import STOCK, Candidate
from verl_split.tools.advise.model import CostModel, Prediction
from verl_split.tools.advise.variants import break_even_push, describe


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def reason(candidates: list[Candidate], model: CostModel) -> str:
    """Why the first candidate is recommended, in one sentence, from the model's own terms."""
    best = candidates[0]
    stock = next((c for c in candidates if c.placement == STOCK), None)
    if best.both:
        return _both_reason(best, candidates)
    if best.shared_rollout:
        return _shared_reason(best, candidates, model)
    if not best.is_split:
        if not model.has_critic:
            return "the runs have no critic, so there is nothing to place apart from the actor (GRPO and the like)."
        split = next((c for c in candidates if c.is_split and not c.shared_rollout), None)
        if split is None or stock is None:
            return "no split placement fits this cluster."
        saved, lost = _trade(split, stock, model)
        p = split.prediction
        return (
            f"under the best split, {split.name}, running the critic beside the actor would save "
            f"{saved:.2f} s per step but the actor's side would lose {lost:.2f} s on {p.actor_gpus} instead of "
            f"{stock.prediction.actor_gpus} GPUs, and the critic pool would idle {_pct(p.idle_share['critic'])} "
            f"of each step ({_pct(p.phases['gen'] / p.step_s)} during generation)."
        )
    p = best.prediction
    if stock is None:
        return (
            f"{best.placement} is the fastest placement that fits; stock ({STOCK}) does not, so there is no "
            "baseline to weigh the split against (see check: below)."
        )
    _, lost = _trade(best, stock, model)
    deferred = (
        " (the critic's update deferred: it runs on behind the actor's update, the weight sync and the next "
        "step's generation)"
        if best.deferred
        else ""
    )
    return (
        f"the critic's values and update take {stock.prediction.critic_busy_s:.2f} s of each stock step; beside "
        f"the actor{deferred} they add only {_critic_extra(p, model):.2f} s, while the actor's side loses "
        f"{lost:.2f} s on {p.actor_gpus} instead of {stock.prediction.actor_gpus} GPUs."
    )


def _shared_reason(best: Candidate, candidates: list[Candidate], model: CostModel) -> str:
    """Why a shared-rollout variant wins: what generation gains on the critic's GPUs, against what it costs."""
    p = best.prediction
    costs = p.shared
    assert costs is not None and costs.push_s is not None  # only a ranked variant is recommended
    a, c = p.actor_gpus, p.critic_gpus
    gen_alone = model.lane_time("gen", a)
    serial = model.lanes["gen"].serial_s if "gen" in model.lanes else 0.0
    runner = next((cand for cand in candidates if not cand.shared_rollout), None)
    versus = (
        f"; {p.step_s:.2f} s per step against {runner.prediction.step_s:.2f} s for the best placement without it, "
        f"{runner.name}"
        if runner is not None
        else ""
    )
    return (
        f"with rollout replicas on the critic pool too, generation runs on all {a + c} GPUs: "
        f"{p.phases['gen']:.2f} s instead of {gen_alone:.2f} s on the actor pool's {a} (at most gen x C/(A+C) = "
        f"{gen_alone * c / (a + c):.2f} s could go; its serial part, the long tail, {serial:.2f} s, stays), for a "
        f"weight push of {costs.push_s:.2f} s ({costs.push_basis}) and a critic offload of {costs.offload_s:.2f} s "
        f"({costs.offload_basis}){versus}. This is the model's prediction only: shared rollout has not been "
        "measured on GPUs by us, so check it with a run."
    )


def _both_reason(best: Candidate, candidates: list[Candidate]) -> str:
    """Why both together win: the critic's excess hides behind the actor pool's generation, and the critic pool
    generates for the rest of it."""
    p, late = best.prediction, best.prediction.late
    assert late is not None and p.shared is not None
    others = [
        f"{c.name} {c.prediction.step_s:.2f} s"
        for c in (
            next((c for c in candidates if c.shared_rollout and not c.deferred), None),
            next((c for c in candidates if c.deferred and not c.shared_rollout), None),
            next((c for c in candidates if not c.shared_rollout and not c.deferred), None),
        )
        if c is not None
    ]
    versus = f" ({', '.join(others)})" if others else ""
    return (
        "with shared rollout and the deferred critic update both on, "
        f"{describe(late, p.actor_gpus, p.critic_gpus)}; "
        f"{p.step_s:.2f} s per step against the best with one switch off or neither{versus}. The push is "
        f"{p.shared.push_basis}. This is the model's prediction only: the combination has run on CPU only, never "
        "on GPUs, so check it with a run."
    )


def _critic_extra(p: Prediction, model: CostModel) -> float:
    """What the critic's lanes add to a split step beyond the actor's: the part the overlaps do not hide."""
    return max(p.step_s - model.fixed_s - p.actor_busy_s, 0.0)


def _trade(split: Candidate, stock: Candidate, model: CostModel) -> tuple[float, float]:
    """(saved, lost): stock step - split step == saved - lost.

    saved: the critic's time on stock's critical path, less what it still adds beside the actor;
    lost: how much longer the actor's lanes take on the split's smaller pool.
    """
    s, p = stock.prediction, split.prediction
    critic_stock = s.critic_busy_s
    saved = critic_stock - _critic_extra(p, model)
    lost = p.actor_busy_s - s.actor_busy_s
    return saved, lost


def caveat(candidates: list[Candidate], step_cv: float) -> str | None:
    """A note when the runner-up is within the runs' step-to-step spread of the recommendation."""
    if len(candidates) < 2 or candidates[0].prediction.step_s <= 0:
        return None
    gap = candidates[1].prediction.step_s / candidates[0].prediction.step_s - 1.0
    if gap < step_cv:
        return (
            f"the runner-up, {candidates[1].name}, is predicted only {_pct(gap)} slower, within the runs' "
            f"step-to-step spread ({_pct(step_cv)}): measure both before choosing."
        )
    return None


# -- deferral, shared rollout or both --------------------------------------------------------------
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
