"""Lay a parsed placement onto a cluster: split the GPUs, name the pools, check the run's requirements.

The rules (odd counts, hybrid engine, collocation) are in the package docstring."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement.batch import batch_message, batch_problems
from verl_split.placement.checks import check_parallel_sizes, check_same_count_per_node
from verl_split.placement.model import (
    ACTOR_POOL,
    ACTOR_SIDE,
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
        groups = _lay_groups(placement, cluster, req)
    else:
        actor_gpus, critic_gpus = _split_gpus(placement, cluster)
        groups = [(("actor", "rollout", "ref"), actor_gpus, "actor side"), (split_roles, critic_gpus, "critic side")]

    pools = _name_pools(groups, cluster)
    plan = Plan(
        cluster=cluster,
        pools=pools,
        placement=placement.text,
        source=src,
        notes=tuple(notes),
        shared_rollout=shared_rollout,
    )
    check_parallel_sizes(plan, req)
    check_same_count_per_node(plan, lambda: _layouts_that_fit(placement, plan, req, shared_rollout) if suggest else [])
    if shared_rollout:
        check_shared_rollout(plan, req)
    found = batch_problems(plan, req.batch)
    if found:
        assert req.batch is not None
        layouts = _layouts_that_fit(placement, plan, req, shared_rollout) if suggest else []
        raise PlacementError(batch_message(plan, req.batch, found, layouts))
    return plan


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


def _lay_groups(
    placement: Placement, cluster: Cluster, req: Requirements
) -> list[tuple[tuple[str, ...], tuple[int, ...], str]]:
    src = placement.source
    needed = req.needed_roles()
    owner_of_gpu: dict[int, str] = {}
    group_of_role: dict[str, str] = {}
    laid = []
    for group in placement.groups:
        for role in group.roles:
            if role in group_of_role:
                raise PlacementError(
                    f"{src}: role {role!r} is in two groups, {group_of_role[role]!r} and {group.text!r}. "
                    "A role runs in one pool: keep it in one group (roles in one group are collocated)."
                )
            group_of_role[role] = group.text
        if group.gpus is None:
            gpus = tuple(range(cluster.n_gpus))
        else:
            gpu_list: list[int] = []
            for low, high in group.gpus:
                if high >= cluster.n_gpus:  # checked before expanding: '0-99999999999' must stay cheap
                    raise PlacementError(
                        f"{src}: GPU {high} in group {group.text!r} is outside the cluster ({cluster.describe()}). "
                        f"Use ids 0-{cluster.n_gpus - 1}, or raise trainer.nnodes / trainer.n_gpus_per_node."
                    )
                for gpu in range(low, high + 1):
                    if gpu in gpu_list:
                        raise PlacementError(
                            f"{src}: GPU {gpu} is listed twice in group {group.text!r}. List each GPU once."
                        )
                    gpu_list.append(gpu)
            gpus = tuple(sorted(gpu_list))
        for gpu in gpus:
            if gpu in owner_of_gpu:
                raise PlacementError(
                    f"{src}: GPU {gpu} is in two groups, {owner_of_gpu[gpu]!r} and {group.text!r}. "
                    "Give each GPU to one group; to collocate roles on the same GPUs, list them in one group "
                    "(e.g. 'actor,rollout,ref,critic:all')."
                )
            owner_of_gpu[gpu] = group.text
        laid.append((group, gpus))

    if "actor" not in group_of_role:
        raise PlacementError(f"{src}: no group holds the actor. Add it, e.g. 'actor,rollout,ref:0-3;critic:4-7'.")
    actor_group = group_of_role["actor"]
    for role, what in (
        ("rollout", "actor and rollout are one worker in verl's hybrid engine (ActorRolloutRefWorker)"),
        ("ref", "ref runs inside the actor's worker in verl 0.9 (Role.ActorRolloutRef)"),
    ):
        if role in group_of_role and group_of_role[role] != actor_group:
            raise PlacementError(
                f"{src}: {role!r} is in group {group_of_role[role]!r} but the actor is in {actor_group!r}; {what}, "
                f"so they cannot be placed apart. Move {role!r} into the actor's group, or leave it out "
                "(it follows the actor)."
            )
    if req.reward_own_pool and "reward" in group_of_role:
        raise PlacementError(
            f"{src}: the reward model has its own reward_pool (reward.reward_model.enable_resource_pool=true), "
            f"outside the trainer's GPUs, yet group {group_of_role['reward']!r} places it. Remove 'reward' from "
            "the placement, or set reward.reward_model.enable_resource_pool=false."
        )
    if req.critic and "critic" not in group_of_role:
        raise PlacementError(
            f"{src}: this run needs a critic ({req.critic_reason}) but no group holds it. Add a group such as "
            f"'critic:{cluster.n_gpus // 2}-{cluster.n_gpus - 1}', or disable the critic (critic.enable=false)."
        )
    if req.reward and "reward" not in group_of_role:
        raise PlacementError(
            f"{src}: the reward model is enabled (reward.reward_model.enable=true) but no group holds 'reward'. "
            "Add it to the critic's group (e.g. 'critic,reward:4-7') or the actor's."
        )

    result = []
    for group, gpus in laid:
        used = tuple(r for r in ROLES if r in group.roles and r in needed)
        if "actor" in group.roles:
            # rollout and ref follow the actor even when not written out.
            used = tuple(r for r in ROLES if r in needed and (r in group.roles or r in ACTOR_SIDE))
        if not used:
            unused = ", ".join(group.roles)
            raise PlacementError(
                f"{src}: group {group.text!r} holds only roles this run does not use ({unused}; critic: "
                f"{'on' if req.critic else 'off, ' + req.critic_reason}; reward model on the trainer's GPUs: "
                f"{'on' if req.reward else 'off'}). Drop the group, or use 'all'."
            )
        if "actor" not in group.roles and "critic" not in group.roles:
            raise PlacementError(
                f"{src}: group {group.text!r} holds the reward model alone. Put 'reward' in the critic's or the "
                "actor's group; verl 0.9 gives a reward model a pool of its own only through "
                "reward.reward_model.enable_resource_pool."
            )
        result.append((used, gpus, group.text))
    return result


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
