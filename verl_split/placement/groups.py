"""Lay explicit role groups (``ROLES:GPUS``) onto a cluster: each group's GPUs and roles, checked.

The rules (hybrid engine, collocation, the reward model's pool) are in the package docstring.
"""

from __future__ import annotations

from verl_split.core.errors import PlacementError
from verl_split.placement.model import ACTOR_SIDE, ROLES, Cluster, Placement, Requirements


def lay_groups(
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
    if "rollout" in group_of_role and group_of_role["rollout"] != actor_group:
        raise PlacementError(
            f"{src}: 'rollout' is in group {group_of_role['rollout']!r} but the actor is in {actor_group!r}; actor "
            "and rollout are one worker in verl's hybrid engine (ActorRolloutRefWorker), so they cannot be placed "
            "apart. Move 'rollout' into the actor's group, or leave it out (it follows the actor)."
        )
    if "ref" in group_of_role and group_of_role["ref"] != actor_group:
        _check_reference_apart(src, group_of_role, req)
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
            # rollout and ref follow the actor even when not written out (ref unless another group holds it).
            used = tuple(
                r for r in ROLES if r in needed and (r in group.roles or (r in ACTOR_SIDE and r not in group_of_role))
            )
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


def _check_reference_apart(src: str, group_of_role: dict[str, str], req: Requirements) -> None:
    """The reference in a group apart from the actor's: only beside the critic, and only where verl runs it in a
    worker group of its own (``Role.RefPolicy``; ``Requirements.reference_bound`` says where it does not)."""
    ref_group, actor_group = group_of_role["ref"], group_of_role["actor"]
    keep = "Move 'ref' into the actor's group, or leave it out (it follows the actor)."
    if not req.reference:
        raise PlacementError(
            f"{src}: group {ref_group!r} places the reference apart from the actor, but this run has no reference "
            "model: no KL term reads its log-probs (actor_rollout_ref.actor.use_kl_loss and "
            "algorithm.use_kl_in_reward are false). Drop 'ref' from that group."
        )
    if req.reference_bound:
        raise PlacementError(
            f"{src}: 'ref' is in group {ref_group!r}, apart from the actor's {actor_group!r}, but "
            f"{req.reference_bound}. {keep}"
        )
    if group_of_role.get("critic") != ref_group or not req.critic:
        raise PlacementError(
            f"{src}: 'ref' is in group {ref_group!r}, which holds no critic this run trains. The reference runs "
            "either in the actor's worker or in a worker group of its own on the critic's pool: put it in the "
            "critic's group (e.g. 'actor,rollout:0-5;critic,ref:6-7'), or in the actor's (or leave it out: it "
            "follows the actor)."
        )
