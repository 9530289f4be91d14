"""The placements ``verl-split advise`` compares, ranked by predicted step time, and the one it recommends.

Candidates are ``split_placement.placement`` values, laid out and checked by the real planner
(:func:`verl_split.placement.plan_placement`): ``all`` (stock colocated), ``halves``, ``per-node`` on
several nodes, every per-node ratio ``A:C`` with ``A + C`` the node's GPUs, and on several nodes every
split into two node groups (``actor,rollout,ref:0-15;critic:16-31``). Placements that give the pools
the same GPU counts get the same prediction (the model does not see which node a GPU is on): the first
is kept, the others are listed beside it.

Given shared rollout's costs, every split also gets its ``+shared`` variant where the critic pool holds whole
rollout replicas. A variant whose weight push is not known is not ranked: its step is a lower bound, listed after
the ranking, and never recommended. Given the deferral's weight sync, a split whose critic update outlasts its
actor update also gets its ``+defer`` variant: the critic's update deferred into the next step; and, given both,
its ``+shared+defer`` variant: both switches on, the critic pool joining generation when its update is done
(the variants' terms: :mod:`verl_split.tools.advise.variants`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.core.settings import OVERLAP_PHASES
from verl_split.placement import CRITIC_POOL, Cluster, ParallelSize, Plan, Requirements, plan_placement
from verl_split.placement.memory import with_memory_estimate
from verl_split.tools.advise.model import OVERLAPS, CostModel, Prediction, predict
from verl_split.tools.advise.pool_memory import MemoryRule
from verl_split.tools.advise.variants import (
    BOTH_TAG,
    DEFER_PHASE,
    DEFER_TAG,
    SHARED_TAG,
    DeferralCosts,
    SharedRolloutCosts,
)

STOCK = "all"


@dataclass(frozen=True)
class Candidate:
    """One placement, its pools' GPU counts and the model's prediction for it."""

    placement: str
    prediction: Prediction
    #: None when stock does not fit the cluster (``stock_fit``): no baseline to compare against.
    speedup_vs_stock: float | None
    same_prediction_as: tuple[str, ...] = field(default=())

    @property
    def is_split(self) -> bool:
        return not self.prediction.colocated

    @property
    def shared_rollout(self) -> bool:
        """The critic pool generates too (``+shared``, and ``+shared+defer``)."""
        return self.prediction.shared is not None

    @property
    def deferred(self) -> bool:
        """The critic's update runs on into the next step (``+defer``, and ``+shared+defer``)."""
        return self.prediction.deferred is not None or self.prediction.late is not None

    @property
    def both(self) -> bool:
        """Shared rollout and the deferral together: the critic pool joins generation late."""
        return self.prediction.late is not None

    @property
    def ranked(self) -> bool:
        """False for a shared-rollout variant whose weight push is not known: its step is a lower bound."""
        return self.prediction.shared is None or self.prediction.shared.priced

    @property
    def name(self) -> str:
        if self.both:
            return f"{self.placement} {BOTH_TAG}"
        if self.deferred:
            return f"{self.placement} {DEFER_TAG}"
        return f"{self.placement} {SHARED_TAG}" if self.shared_rollout else self.placement

    def environment(self) -> dict[str, str]:
        """The ``VERL_SPLIT*`` variables that run what this row predicts, every switch the prediction assumed:
        ``VERL_SPLIT_OVERLAP`` on every split (its default, ``on``, would defer the critic's update on a row
        predicted without it); ``VERL_SPLIT_LATE_JOIN=on`` on ``+shared+defer`` (off on GPUs unless asked for:
        the critic pool would sit out every step whose critic update runs past the sync). Empty: stock verl."""
        if not self.is_split:
            return {}
        overlaps = self.prediction.overlaps
        phases = [phase for phase in OVERLAP_PHASES if phase in overlaps or (phase == DEFER_PHASE and self.deferred)]
        env = {
            "VERL_SPLIT": "1",
            "VERL_SPLIT_PLACEMENT": self.placement,
            "VERL_SPLIT_OVERLAP": ",".join(phases) or "off",
        }
        if self.shared_rollout:
            env["VERL_SPLIT_SHARED_ROLLOUT"] = "1"
        if self.both:
            env["VERL_SPLIT_LATE_JOIN"] = "on"
        return env

    def command(self) -> str:
        """The launch line of this row (``environment``), quoted for a POSIX shell."""
        env = self.environment()
        if not env:
            return "python -m verl.trainer.main_ppo ...  (VERL_SPLIT unset: stock verl)"
        assignments = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
        return f"{assignments} python -m verl.trainer.main_ppo ..."

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        return {
            "placement": self.placement,
            "environment": self.environment(),
            "command": self.command(),
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
            "late_join": None if p.late is None else p.late.to_json(),
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
    requirements: Requirements | None = None,
    memory: MemoryRule | None = None,
    ran: frozenset[tuple[bool, int, int]] = frozenset(),
) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """Every candidate the planner accepts, fastest first; and the rejected ones with the planner's reason.

    ``requirements``: the job's, as the planner reads them from its config (the rollout replica, the batch,
    Megatron meshes: :mod:`verl_split.tools.advise.requirements`); None: the rollout replica ``rollout_tp`` only.
    ``memory``: each pool must hold its models (:mod:`verl_split.tools.advise.pool_memory`), except on the pool
    sizes a run trained on (``ran``: (colocated, actor GPUs, critic GPUs)), which held them.

    With ``shared``, each split's shared-rollout variant too; the variants that are not ranked (their push is
    not known) come last, by their lower bound. With ``deferral``, each split's deferred-critic variant; with
    both, where the critic's update outlasts the actor's, each shared split's variant with both on.
    """
    if requirements is None:
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
        why = None if memory is None or key in ran else memory.refusal(key[1], key[2], key[0])
        if why is not None:
            rejected.append((name, why))
            continue
        layouts.setdefault(key, []).append(name)
    predictions = {
        key: predict(model, actor_gpus=key[1], critic_gpus=key[2], colocated=key[0], overlaps=overlaps)
        for key in layouts
    }
    for key in [k for k, p in predictions.items() if p.step_s == float("inf")]:
        # The generation model found no rollout TP whose replica holds the weights and a sequence's KV cache.
        why = f"no rollout TP fits the {'pool' if key[0] else 'actor pool'} of {key[1]} GPUs beside its training state"
        rejected += [(name, why) for name in layouts.pop(key)]
        del predictions[key]
    stock_key = (True, cluster.n_gpus, cluster.n_gpus)
    stock_step = predictions[stock_key].step_s if stock_key in predictions else None

    def candidate(names: list[str], prediction: Prediction) -> Candidate:
        speedup = (stock_step / prediction.step_s) if stock_step and prediction.step_s else None
        return Candidate(names[0], prediction, speedup, same_prediction_as=tuple(names[1:]))

    candidates = [candidate(names, predictions[key]) for key, names in layouts.items()]
    for (colocated, actor_gpus, critic_gpus), names in layouts.items():
        if colocated or shared is None:
            continue
        # The planner's own shared-rollout check (whole rollout replicas on every node of the critic pool):
        # placements of the same sizes may differ per node.
        plans = []
        for name in names:
            try:
                plans.append((name, plan_placement(name, cluster, requirements, shared_rollout=True)))
            except PlacementError as exc:
                rejected.append((f"{name} {SHARED_TAG}", str(exc)))
        # And the memory check the launch applies to them (placement/memory.py, as plan_from_config runs it): the
        # critic pool's GPUs at generation and the push, the actor pool's at the push, its vLLM awake under the late
        # join.
        fits = launch_memory_fits(plans, memory, late_join=False, tag=SHARED_TAG, rejected=rejected)
        if fits:
            prediction = predict(model, actor_gpus, critic_gpus, colocated=False, overlaps=overlaps, shared=shared)
            candidates.append(candidate(fits, prediction))
        if plans and deferral is not None:
            both = predict(model, actor_gpus, critic_gpus, False, overlaps=overlaps, shared=shared, deferral=deferral)
            if both.late is not None:  # else the critic's update is done by the sync: the +shared row's
                fits = launch_memory_fits(plans, memory, late_join=True, tag=BOTH_TAG, rejected=rejected)
                if fits:
                    candidates.append(candidate(fits, both))
    if deferral is not None and "critic_update" in model.lanes:
        for key, names in layouts.items():
            if key[0]:
                continue
            prediction = predict(model, key[1], key[2], False, overlaps=overlaps, deferral=deferral)
            # Where the critic's update is no longer than the actor's, deferring it changes nothing: no row.
            if prediction.step_s < predictions[key].step_s - 1e-9:
                candidates.append(candidate(names, prediction))
    # Ranked first, fastest first; on a tie fewer switches first (+shared+defer that never joins is +defer), then
    # the order above (stock, the simpler names, +shared, +defer).
    candidates.sort(key=lambda c: (not c.ranked, round(c.prediction.step_s, 9), c.shared_rollout + c.deferred))
    return candidates, rejected


def launch_memory_fits(
    plans: list[tuple[str, Plan]], memory: MemoryRule | None, late_join: bool, tag: str, rejected: list[tuple[str, str]]
) -> list[str]:
    """The shared-rollout plans whose GPUs pass the launch's memory check (``placement.memory.with_memory_estimate``,
    which ``plan_from_config`` applies before Ray starts), by placement name; each refused one goes to ``rejected``
    as ``name tag`` with the launch's own message. ``late_join``: the push comes beside the actor pool's awake vLLM.
    Without a memory rule, or with the GPU's size unknown, nothing is refused (the launch then reads it from
    ``nvidia-smi``)."""
    fits = []
    for name, plan in plans:
        if memory is not None:
            try:
                with_memory_estimate(
                    plan, memory.job, memory.gpu_gb, memory.critic_params, memory.actor_params, late_join=late_join
                )
            except PlacementError as exc:
                rejected.append((f"{name} {tag}", str(exc)))
                continue
        fits.append(name)
    return fits
