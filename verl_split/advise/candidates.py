"""The placements ``verl-split advise`` compares, ranked by predicted step time, and the one it recommends.

Candidates are ``split_placement.placement`` values, laid out and checked by the real planner
(:func:`verl_split.placement.plan_placement`): ``all`` (stock colocated), ``halves``, ``per-node`` on
several nodes, every per-node ratio ``A:C`` with ``A + C`` the node's GPUs, and on several nodes every
split into two node groups (``actor,rollout,ref:0-15;critic:16-31``). Placements that give the pools
the same GPU counts get the same prediction (the model does not see which node a GPU is on): the first
is kept, the others are listed beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_split.advise.model import OVERLAPS, CostModel, Prediction, predict
from verl_split.errors import PlacementError
from verl_split.placement import CRITIC_POOL, Cluster, ParallelSize, Requirements, plan_placement

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

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        return {
            "placement": self.placement,
            "layout": "colocated" if p.colocated else "split",
            "actor_pool_gpus": p.actor_gpus,
            "critic_pool_gpus": p.critic_gpus,
            "predicted_step_s": p.step_s,
            "speedup_vs_stock": self.speedup_vs_stock,
            "idle_share": dict(p.idle_share),
            "phases_s": {name: p.phases[name] for name in ("gen", "prep", "updates", "other")},
            "lanes_s": dict(p.lanes),
            "same_prediction_as": list(self.same_prediction_as),
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
    model: CostModel, cluster: Cluster, rollout_tp: int = 1, overlaps: frozenset[str] = OVERLAPS
) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """Every candidate the planner accepts, fastest first; and the rejected ones with the planner's reason."""
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
    candidates = [
        Candidate(
            placement=names[0],
            prediction=predictions[key],
            speedup_vs_stock=(stock_step / predictions[key].step_s) if stock_step and predictions[key].step_s else 1.0,
            same_prediction_as=tuple(names[1:]),
        )
        for key, names in layouts.items()
    ]
    # Fastest first; on a tie the order above (stock, then the simpler names).
    candidates.sort(key=lambda c: round(c.prediction.step_s, 9))
    return candidates, rejected


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def reason(candidates: list[Candidate], model: CostModel) -> str:
    """Why the first candidate is recommended, in one sentence, from the model's own terms."""
    best = candidates[0]
    stock = next((c for c in candidates if c.placement == STOCK), None)
    if not best.is_split:
        if not model.has_critic:
            return "the runs have no critic, so there is nothing to place apart from the actor (GRPO and the like)."
        split = next((c for c in candidates if c.is_split), None)
        if split is None or stock is None:
            return "no split placement fits this cluster."
        saved, lost = _trade(split, stock, model)
        p = split.prediction
        return (
            f"under the best split, {split.placement}, running the critic beside the actor would save "
            f"{saved:.2f} s per step but the actor's side would lose {lost:.2f} s on {p.actor_gpus} instead of "
            f"{stock.prediction.actor_gpus} GPUs, and the critic pool would idle {_pct(p.idle_share['critic'])} "
            f"of each step ({_pct(p.phases['gen'] / p.step_s)} during generation)."
        )
    p = best.prediction
    if stock is None:
        return f"{best.placement} is the fastest placement that fits."
    _, lost = _trade(best, stock, model)
    return (
        f"the critic's values and update take {stock.prediction.critic_busy_s:.2f} s of each stock step; beside "
        f"the actor they add only {_critic_extra(p, model):.2f} s, while the actor's side loses {lost:.2f} s on "
        f"{p.actor_gpus} instead of {stock.prediction.actor_gpus} GPUs."
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
            f"the runner-up, {candidates[1].placement}, is predicted only {_pct(gap)} slower, within the runs' "
            f"step-to-step spread ({_pct(step_cv)}): measure both before choosing."
        )
    return None
