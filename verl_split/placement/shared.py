"""Shared rollout's placement checks: the critic's pool must exist apart from the actor's and hold
whole rollout replicas beside its roles. The run-level checks (verl 0.9, v1 sync trainer, merged LoRA)
are ``verl_config.check_shared_rollout_run``; the memory estimate is ``placement.memory``."""

from __future__ import annotations

from verl_split.core.errors import PlacementError
from verl_split.placement.model import MAX_WORKER_GROUPS_PER_GPU, Plan, Requirements

#: How to undo the switch, for the end of every shared-rollout message.
SWITCH_OFF_HINT = "switch shared rollout off (unset VERL_SPLIT_SHARED_ROLLOUT, or split_placement.shared_rollout=false)"


def check_shared_rollout(plan: Plan, req: Requirements) -> None:
    """The critic's pool must exist apart from the actor's and hold whole rollout replicas beside its roles."""
    where = f"{plan.source}={plan.placement!r}"
    actor, critic = plan.pool_of("actor"), plan.pool_of("critic")
    if critic is None:
        raise PlacementError(
            f"shared rollout puts rollout replicas on the critic pool; this run has none ({req.critic_reason}). "
            f"Enable the critic (critic.enable=true) with a split placement such as halves, or {SWITCH_OFF_HINT}."
        )
    if actor is None or critic.name == actor.name:
        raise PlacementError(
            f"shared rollout puts rollout replicas on the critic pool, but {where} places the critic on the actor's "
            f"GPUs ({critic.name}), so there is no second pool to generate on. Choose a split placement such as "
            f"halves or 6:2, or {SWITCH_OFF_HINT}."
        )

    # Whole replicas on every node: verl cuts a pool into replicas of tp x dp x pp GPUs, and
    # verl-split keeps each replica inside one node (its placement group is per node).
    replica = next((p for p in req.parallel if p.role == "rollout"), None)  # absent: 1 GPU, always whole
    for node, count in critic.per_node.items():
        if replica is not None and count % replica.size:
            size, gpus = replica.size, f"{count} GPU{'s' if count > 1 else ''}"
            raise PlacementError(
                f"{where}: the critic pool has {gpus} on node {node}, not a whole number of rollout replicas "
                f"of {size} GPUs ({replica.key}={size}); choose a placement whose critic side holds a multiple of "
                f"{size} GPUs per node{_ratio_hint(plan, size)}, or lower the rollout's parallel size, "
                f"or {SWITCH_OFF_HINT}."
            )

    # Worker groups on the critic pool's GPUs: its roles (critic, a colocated reward model)
    # and the shared rollout's own group. A teacher model never counts: verl 0.9 gives it
    # a teacher_pool of its own (trainer/ppo/v1/trainer_base.py _init_resource_pool_mgr).
    groups = [*critic.roles, "shared rollout"]
    if len(groups) > MAX_WORKER_GROUPS_PER_GPU:
        raise PlacementError(
            f"{where}: shared rollout would put {len(groups)} worker groups on each GPU of the critic pool "
            f"({', '.join(groups)}), but verl lets {MAX_WORKER_GROUPS_PER_GPU} share a GPU (each asks for "
            f"1/{MAX_WORKER_GROUPS_PER_GPU} of it, ResourcePoolManager max_colocate_count) and Ray would wait "
            "forever for the last one. Give the reward model its own pool "
            f"(reward.reward_model.enable_resource_pool=true), or {SWITCH_OFF_HINT}."
        )


def _ratio_hint(plan: Plan, replica: int) -> str:
    """``", e.g. 4:4"``: a split of one node whose two sides both hold whole replicas; empty when none does."""
    per_node = plan.cluster.n_gpus_per_node
    replicas = per_node // replica
    if per_node % replica or replicas < 2:
        return ""
    critic = replica * (replicas // 2)  # the odd replica to the actor's side, as halves does
    return f", e.g. {per_node - critic}:{critic}"
