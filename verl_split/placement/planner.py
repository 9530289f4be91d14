"""Lay a parsed placement onto a cluster: split the GPUs, name the pools, check the run's requirements.

The rules (odd counts, hybrid engine, collocation) are in the package docstring."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement.batch import batch_message, batch_problems
from verl_split.placement.checks import check_parallel_sizes, check_same_count_per_node
from verl_split.placement.groups import lay_groups
from verl_split.placement.megatron import check_megatron, mesh_lines
from verl_split.placement.model import (
    ACTOR_POOL,
    CRITIC_POOL,
    GLOBAL_POOL,
    ROLES,
    Cluster,
    Placement,
    Plan,
    Pool,
    Requirements,
)
from verl_split.placement.parse import parse_placement
from verl_split.placement.shared import SWITCH_OFF_HINT, check_shared_rollout

__all__ = ["SWITCH_OFF_HINT", "plan_placement"]


def plan_placement(
    placement: Placement | str | Sequence[Any],
    cluster: Cluster,
    requirements: Requirements | None = None,
    shared_rollout: bool = False,
    *,
    suggest: bool = True,
) -> Plan:
    """Lay a placement onto a cluster and validate it against the run's requirements.

    ``shared_rollout``: rollout replicas on the critic's pool too; the pool must hold them.
    ``suggest``: a refusal names the nearest layouts that would pass (planning each of them).
    """
    if not isinstance(placement, Placement):
        placement = parse_placement(placement)
    req = requirements or Requirements()
    src = placement.source
    notes: list[str] = []
    split_roles = tuple(r for r in ("critic", "reward") if r in req.needed_roles())

    if placement.kind in ("halves", "per-node", "per-group", "ratio") and not split_roles:
        if placement.kind != "halves":
            raise PlacementError(
                f"{src}={placement.text!r} splits off a critic pool, but this run has no critic "
                f"({req.critic_reason}) and no reward model on the trainer's GPUs, so that pool would hold no "
                "role. Use placement 'all', or enable the critic (critic.enable=true)."
            )
        notes.append(
            f"no critic ({req.critic_reason}) and no reward model on the trainer's GPUs: nothing to split, "
            "so every GPU goes to one global_pool (stock layout)."
        )
        placement = Placement(kind="all", text="all", source=src)

    if placement.kind == "all":
        groups = [(tuple(r for r in ROLES if r in req.needed_roles()), tuple(range(cluster.n_gpus)), "all")]
    elif placement.kind == "groups":
        groups = lay_groups(placement, cluster, req)
    else:
        actor_gpus, critic_gpus = _split_gpus(placement, cluster)
        groups = [(("actor", "rollout", "ref"), actor_gpus, "actor side"), (split_roles, critic_gpus, "critic side")]

    pools = _name_pools(groups, cluster)
    ref_pool = next((pool.name for pool in pools if "ref" in pool.roles and "actor" not in pool.roles), None)
    if ref_pool is not None:
        notes.append(
            f"the reference runs in a worker group of its own on {ref_pool}, beside the critic (RayPPOTrainer's "
            "Role.RefPolicy; verl's v1 trainer keeps it in the actor's worker and is refused this layout)."
        )
    plan = Plan(
        cluster=cluster,
        pools=pools,
        placement=placement.text,
        source=src,
        notes=tuple(notes),
        shared_rollout=shared_rollout,
    )
    check_parallel_sizes(plan, req)
    check_same_count_per_node(
        plan, lambda: _layouts_keeping_proportion(placement, plan, req, shared_rollout) if suggest else []
    )
    if shared_rollout:
        check_shared_rollout(plan, req)

    def layouts() -> list[str]:
        return _layouts_that_fit(placement, plan, req, shared_rollout) if suggest else []

    warnings = check_megatron(plan, req, layouts)
    found = batch_problems(plan, req.batch)
    if found:
        assert req.batch is not None
        # Without suggestions (a layout probed for a hint) the message is not read: skip its search for sizes.
        raise PlacementError(batch_message(plan, req.batch, found, layouts()) if suggest else "batch")
    return dataclasses.replace(plan, notes=(*plan.notes, *warnings), meshes=mesh_lines(plan, req))


def _layouts_that_fit(placement: Placement, plan: Plan, req: Requirements, shared_rollout: bool) -> list[str]:
    """The per-node ratios ``A:C`` nearest to this layout's (one with fewer actor GPUs, one with more) that plan."""
    cluster = plan.cluster
    per_node = cluster.n_gpus_per_node
    if placement.kind == "all" or per_node < 2:
        return []
    if placement.ratio is not None:
        current = placement.ratio[0]
    elif placement.kind in ("halves", "per-node") and (cluster.nnodes == 1 or placement.kind == "per-node"):
        current = (per_node + 1) // 2
    else:  # whole nodes (per-group) or explicit groups: the actor pool's count on its first node
        actor_pool = plan.pool_of("actor")
        current = next(iter(actor_pool.per_node.values())) if actor_pool is not None else per_node
    fits = []
    for actor in range(1, per_node):
        text = f"{actor}:{per_node - actor}"
        if actor == current and placement.kind == "ratio":
            continue
        try:
            plan_placement(text, cluster, req, shared_rollout, suggest=False)
        except PlacementError:
            continue
        fits.append(actor)
    below = [a for a in fits if a <= current][-1:]
    above = [a for a in fits if a > current][:1]
    return [f"{a}:{per_node - a}" for a in below + above]


def _layouts_keeping_proportion(placement: Placement, plan: Plan, req: Requirements, shared: bool) -> list[str]:
    """Per-node ratios ``A:C`` that keep the share of GPUs the placement gave each side, for an uneven pool.

    ``actor:0-5,8-9;critic:6-7,10-15`` asks 8 GPUs for each side: ``4:4`` keeps that (the same totals), where
    the nearest ratio to the first node's count (``6:2``) would not. Ranked by how far a ratio's share is from
    the asked one, then by the GPUs it leaves idle, then by how far its totals are; the first that plans is
    offered, and the next one too when the first does not keep the share exactly.
    """
    actor, critic = plan.pool_of("actor"), plan.pool_of("critic")
    if actor is None or critic is None or actor is critic:  # one pool holds both sides: no share to keep
        return _layouts_that_fit(placement, plan, req, shared)
    asked = Fraction(actor.size, actor.size + critic.size)
    per_node, nnodes = plan.cluster.n_gpus_per_node, plan.cluster.nnodes

    def rank(ratio: tuple[int, int]) -> tuple[Fraction, int, int]:
        a, c = ratio
        return abs(Fraction(a, a + c) - asked), per_node - a - c, abs((a + c) * nnodes - actor.size - critic.size)

    fits: list[tuple[int, int]] = []
    ratios = [(a, c) for a in range(1, per_node) for c in range(1, per_node - a + 1)]
    for ratio in sorted(ratios, key=rank):
        try:
            plan_placement(f"{ratio[0]}:{ratio[1]}", plan.cluster, req, shared, suggest=False)
        except PlacementError:
            continue
        fits.append(ratio)
        if rank(ratio)[0] == 0 or len(fits) == 2:
            break
    return [f"{a}:{c}" for a, c in fits]


def _split_gpus(placement: Placement, cluster: Cluster) -> tuple[tuple[int, ...], tuple[int, ...]]:
    nnodes, per_node = cluster.nnodes, cluster.n_gpus_per_node
    src = placement.source
    kind = placement.kind
    if kind == "halves":
        kind = "per-node" if nnodes == 1 else "per-group"
    if kind == "per-group":
        if nnodes < 2:
            raise PlacementError(
                f"{src}={placement.text!r} splits the nodes into two groups, but the cluster has 1 node. "
                "Use 'per-node' (or 'halves') to split the node's GPUs instead."
            )
        actor_nodes = (nnodes + 1) // 2  # the odd node goes to the actor's side (module docstring)
        boundary = actor_nodes * per_node
        return tuple(range(boundary)), tuple(range(boundary, cluster.n_gpus))
    if kind == "per-node":
        if per_node < 2:
            raise PlacementError(
                f"{src}={placement.text!r} splits each node's GPUs, but a node has only 1 GPU. "
                "Use 'per-group' with 2 or more nodes, or 'all'."
            )
        actor, critic = (per_node + 1) // 2, per_node // 2  # the odd GPU goes to the actor's side
    else:
        assert placement.ratio is not None
        actor, critic = placement.ratio
        if actor == 0:
            raise PlacementError(
                f"{src}={placement.text!r} gives the actor's pool 0 GPUs per node, an empty pool. "
                "Give each side at least 1 GPU, e.g. 6:2."
            )
        if critic == 0:
            raise PlacementError(
                f"{src}={placement.text!r} gives the critic's pool 0 GPUs per node, an empty pool. "
                "Give each side at least 1 GPU, e.g. 6:2, or use 'all' to collocate everything."
            )
        if actor + critic > per_node:
            raise PlacementError(
                f"{src}={placement.text!r} asks for {actor + critic} GPUs per node but a node has {per_node} "
                f"(trainer.n_gpus_per_node). Make A + C at most {per_node}, e.g. "
                f"{max(1, per_node - max(1, per_node // 4))}:{max(1, per_node // 4)}."
            )
    actor_gpus: list[int] = []
    critic_gpus: list[int] = []
    for node in range(nnodes):
        base = node * per_node
        actor_gpus.extend(range(base, base + actor))
        critic_gpus.extend(range(base + actor, base + actor + critic))
    return tuple(actor_gpus), tuple(critic_gpus)


def _name_pools(groups: list[tuple[tuple[str, ...], tuple[int, ...], str]], cluster: Cluster) -> tuple[Pool, ...]:
    pools = []
    for roles, gpus, label in groups:
        if not gpus:
            raise PlacementError(f"the pool for {label!r} ({', '.join(roles)}) has no GPU. Give it at least one.")
        if "actor" in roles:
            name = GLOBAL_POOL if "critic" in roles or len(groups) == 1 else ACTOR_POOL
        else:
            name = CRITIC_POOL
        pools.append(Pool(name=name, roles=roles, gpus=gpus, n_gpus_per_node=cluster.n_gpus_per_node))
    # The actor's pool first: verl creates pools in spec order, and the picture reads better.
    pools.sort(key=lambda p: 0 if "actor" in p.roles else 1)
    return tuple(pools)
