"""The placements ``verl-split advise`` compares, ranked by predicted step time, and the one it recommends.

Candidates are ``split_placement.placement`` values, laid out and checked by the real planner
(:func:`verl_split.placement.plan_placement`): ``all`` (stock colocated), ``halves``, ``per-node`` on
several nodes, every per-node ratio ``A:C`` with ``A + C`` the node's GPUs, and on several nodes every
split into two node groups (``actor,rollout,ref:0-15;critic:16-31``). Placements that give the pools
the same GPU counts get the same prediction (the model does not see which node a GPU is on): the first
is kept, the others are listed beside it.

Given shared rollout's costs, every split also gets its ``+shared`` variant (:mod:`verl_split.tools.advise.shared`)
where the critic pool holds whole rollout replicas. A variant whose weight push is not known is not ranked:
its step is a lower bound, listed after the ranking, and never recommended. Given the deferral's weight sync,
split whose critic update outlasts its actor update also gets its ``+defer`` variant
(:mod:`verl_split.tools.advise.deferral`): the critic's update deferred into the next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement import CRITIC_POOL, Cluster, ParallelSize, Requirements, plan_placement
from verl_split.tools.advise import deferral as deferral_module
from verl_split.tools.advise.deferral import DeferralCosts
from verl_split.tools.advise.model import OVERLAPS, CostModel, Prediction, predict
from verl_split.tools.advise.shared import TAG, SharedRolloutCosts

STOCK = "all"


@dataclass(frozen=True)
class Candidate:
    """One placement, its pools' GPU counts and the model's prediction for it."""

    placement: str
    prediction: Prediction
    speedup_vs_stock: float
    same_prediction_as: tuple[str, ...] = field(default=())

    @property
    def is_split(self) -> bool:
        return not self.prediction.colocated

    @property
    def shared_rollout(self) -> bool:
        return self.prediction.shared is not None

    @property
    def deferred(self) -> bool:
        return self.prediction.deferred is not None

    @property
    def ranked(self) -> bool:
        """False for a shared-rollout variant whose weight push is not known: its step is a lower bound."""
        return self.prediction.shared is None or self.prediction.shared.priced

    @property
    def name(self) -> str:
        if self.deferred:
            return f"{self.placement} {deferral_module.TAG}"
        return f"{self.placement} {TAG}" if self.shared_rollout else self.placement

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        return {
            "placement": self.placement,
            "shared_rollout": self.shared_rollout,
            "deferred_critic": self.deferred,
            "layout": "colocated" if p.colocated else "split",
            "actor_pool_gpus": p.actor_gpus,
            "critic_pool_gpus": p.critic_gpus,
            "predicted_step_s": p.step_s,
            "speedup_vs_stock": self.speedup_vs_stock,
            "idle_share": dict(p.idle_share),
            "phases_s": {name: p.phases[name] for name in ("gen", "prep", "updates", "other")},
            "lanes_s": dict(p.lanes),
            "same_prediction_as": list(self.same_prediction_as),
            "shared_rollout_costs": None if p.shared is None else p.shared.to_json(),
            "deferral": None if p.deferred is None else p.deferred.to_json(),
        }


def placement_names(cluster: Cluster, has_critic: bool) -> list[str]:
    """The placements to try on this cluster, stock first."""
    names = [STOCK]
    if not has_critic:
        return names  # nothing to split off (GRPO and the like)
    nodes, per_node = cluster.nnodes, cluster.n_gpus_per_node
    names.append("halves")
    if nodes > 1:
        names.append("per-node")
    names += [f"{a}:{per_node - a}" for a in range(per_node - 1, 0, -1)]
    for actor_nodes in range(nodes - 1, 0, -1):
        boundary = actor_nodes * per_node
        names.append(f"actor,rollout,ref:0-{boundary - 1};critic:{boundary}-{cluster.n_gpus - 1}")
    return names


def rank(
    model: CostModel,
    cluster: Cluster,
    rollout_tp: int = 1,
    overlaps: frozenset[str] = OVERLAPS,
    shared: SharedRolloutCosts | None = None,
    deferral: DeferralCosts | None = None,
) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """Every candidate the planner accepts, fastest first; and the rejected ones with the planner's reason.

    With ``shared``, each split's shared-rollout variant too; the variants that are not ranked (their push is
    not known) come last, by their lower bound. With ``deferral``, each split's deferred-critic variant.
    """
    requirements = Requirements(
        critic=model.has_critic,
        critic_reason="the runs measured no critic" if not model.has_critic else "the runs measured a critic",
        parallel=(ParallelSize("rollout", rollout_tp, "--rollout-tp", within_node=True),) if rollout_tp > 1 else (),
    )
    layouts: dict[tuple[bool, int, int], list[str]] = {}
    rejected = []
    for name in placement_names(cluster, model.has_critic):
        try:
            plan = plan_placement(name, cluster, requirements)
        except PlacementError as exc:
            rejected.append((name, str(exc)))
            continue
        critic_pool = next((pool for pool in plan.pools if pool.name == CRITIC_POOL), None)
        if critic_pool is None:
            key = (True, plan.pools[0].size, plan.pools[0].size)
        else:
            key = (False, plan.pools[0].size, critic_pool.size)
        layouts.setdefault(key, []).append(name)
    predictions = {
        key: predict(model, actor_gpus=key[1], critic_gpus=key[2], colocated=key[0], overlaps=overlaps)
        for key in layouts
    }
    stock_key = (True, cluster.n_gpus, cluster.n_gpus)
    stock_step = predictions[stock_key].step_s if stock_key in predictions else None

    def candidate(names: list[str], prediction: Prediction) -> Candidate:
        speedup = (stock_step / prediction.step_s) if stock_step and prediction.step_s else 1.0
        return Candidate(names[0], prediction, speedup, same_prediction_as=tuple(names[1:]))

    candidates = [candidate(names, predictions[key]) for key, names in layouts.items()]
    for (colocated, actor_gpus, critic_gpus), names in layouts.items():
        if colocated or shared is None:
            continue
        # The planner's own shared-rollout check (whole rollout replicas on every node of the critic pool):
        # placements of the same sizes may differ per node.
        fits = []
        for name in names:
            try:
                plan_placement(name, cluster, requirements, shared_rollout=True)
                fits.append(name)
            except PlacementError as exc:
                rejected.append((f"{name} {TAG}", str(exc)))
        if fits:
            prediction = predict(model, actor_gpus, critic_gpus, colocated=False, overlaps=overlaps, shared=shared)
            candidates.append(candidate(fits, prediction))
    if deferral is not None and "critic_update" in model.lanes:
        for key, names in layouts.items():
            if key[0]:
                continue
            prediction = predict(model, key[1], key[2], False, overlaps=overlaps, deferral=deferral)
            # Where the critic's update is no longer than the actor's, deferring it changes nothing: no row.
            if prediction.step_s < predictions[key].step_s - 1e-9:
                candidates.append(candidate(names, prediction))
    # Ranked first, fastest first; on a tie the order above (stock, then the simpler names, +shared, +defer).
    candidates.sort(key=lambda c: (not c.ranked, round(c.prediction.step_s, 9)))
    return candidates, rejected


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def reason(candidates: list[Candidate], model: CostModel) -> str:
    """Why the first candidate is recommended, in one sentence, from the model's own terms."""
    best = candidates[0]
    stock = next((c for c in candidates if c.placement == STOCK), None)
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
        return f"{best.placement} is the fastest placement that fits."
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
