"""A placement's inputs from the job's view of verl's trainer config (``placement.job``, read once by
``placement.job_config``): the planner's requirements, the placement block, the cluster, the plan.

Each public function takes verl's config, as the runtime's seams and ``verl-split plan`` hold it, or the view
already read from it; ``plan_from_config`` reads the view once and hands it to the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement import megatron, memory
from verl_split.placement.batch_config import batch_of, ulysses_note
from verl_split.placement.job import Job, Split
from verl_split.placement.job_config import as_job, split_from_config
from verl_split.placement.model import DEFAULT_READY_TIMEOUT_S, Cluster, ParallelSize, Placement, Plan, Requirements
from verl_split.placement.parse import DEFAULT_PLACEMENT, parse_placement
from verl_split.placement.planner import plan_placement
from verl_split.placement.shared import SWITCH_OFF_HINT

#: Keys accepted in the ``split_placement`` config block.
CONFIG_KEYS: tuple[str, ...] = ("placement", "groups", "ready_timeout_s", "shared_rollout")
#: ``trainer.v1.trainer_mode`` values shared rollout runs under: the asynchronous modes
#: (colocate_async, separate_async) schedule generation and weight sync their own way.
SHARED_ROLLOUT_TRAINER_MODES: tuple[str, ...] = ("sync",)


def requirements_from_config(config: Job | Any, family: str | None = None) -> Requirements:
    """What a placement must satisfy, from verl's (OmegaConf or dict) trainer config or its job's view.

    ``family``: whose batch rules apply ("0.7", "0.8", "0.9"); None reads the installed verl's.
    """
    job = as_job(config, family)
    critic = job.needs_critic
    reward = job.reward_model
    rollout = "actor_rollout_ref.rollout"
    # A rollout replica is tp * dp * pp GPUs (verl/workers/rollout/replica.py RolloutReplica.world_size).
    parallel = [
        ParallelSize(
            "rollout", job.rollout.replica, f"{rollout}.tensor_model_parallel_size x data x pipeline", within_node=True
        )
    ]
    for name in ("actor", "ref", "critic"):
        if name == "critic" and not critic:
            continue
        role = job.role(name)
        sizes = [*role.ulysses, *((f"{block.key}.fsdp_size", block.size) for block in role.fsdp_blocks)]
        parallel.extend(ParallelSize(name, 1 if size is None else size, key) for key, size in sizes)
        if role.strategy == "megatron":
            key = f"{role.prefix}.megatron.tensor_model_parallel_size x pipeline x context"
            parallel.append(ParallelSize(name, role.megatron_size, key, cite=megatron.MODEL_SIZE_CITE))
    if reward.enabled and not reward.own_pool:
        key = "reward.reward_model.rollout.tensor_model_parallel_size x data x pipeline"
        parallel.append(ParallelSize("reward", reward.replica, key, True))
    batch = batch_of(job)
    return Requirements(
        critic=critic,
        critic_reason=job.critic_reason,
        reward=reward.enabled and not reward.own_pool,
        reward_own_pool=reward.enabled and reward.own_pool,
        parallel=tuple(p for p in parallel if p.size > 1),
        batch=batch,
        megatron=job.meshes(job.running_roles),
        family=batch.family if batch is not None else job.asked_family,
        reference=job.uses_reference,
        reference_bound=reference_bound(job),
    )


def reference_bound(job: Job) -> str:
    """Why verl cannot run this job's reference in a worker group apart from the actor's ("" when it can).

    ``RayPPOTrainer`` (0.7 to 0.9) builds a ``Role.RefPolicy`` worker group on that role's own pool whenever its
    role mapping has one (``init_workers`` in ``verl/trainer/ppo/ray_trainer.py``); the runtime gives it one
    (``runtime/placement/pools.separate_reference``). verl's v1 trainer builds one only without the hybrid engine
    (``actor_role == Role.Actor`` in ``PPOTrainer._setup``, ``verl/trainer/ppo/v1/trainer_base.py``), and with
    LoRA the reference is the actor's own model with the adapter off (``ref_in_actor`` in both trainers).
    """
    model = job.actor.model
    if model.lora_rank > 0:
        return (
            f"this run trains LoRA (rank {model.lora_rank}), and then verl computes the reference's log-probs with "
            "the actor's own worker, its adapter switched off (ref_in_actor): there is no reference model to move"
        )
    if job.rules == "v1":
        return (
            "verl's v1 trainer (trainer.use_v1=true, the default on 0.9) keeps the reference inside the actor's "
            "hybrid worker (ActorRolloutRefWorker): it builds a reference worker group of its own only without the "
            "hybrid engine (PPOTrainer._setup in verl/trainer/ppo/v1/trainer_base.py). RayPPOTrainer runs it apart: "
            "set trainer.use_v1=false for this layout"
        )
    return ""


def placement_from_config(config: Job | Any, env_value: str | None = None) -> Placement:
    """The run's placement: ``split_placement`` in the config wins over ``VERL_SPLIT_PLACEMENT``.

    The config is the run's own, recorded setting (hydra logs it with the run); the environment
    variable is a default for every run of a shell, so the more specific one wins.
    """
    block = split_from_config(config).block
    if block is not None:
        if not isinstance(block, Mapping):
            raise PlacementError(
                f"split_placement must be a mapping such as {{placement: '6:2'}}, got {block!r}. "
                "Use +split_placement.placement=6:2 on the command line."
            )
        unknown = sorted(str(k) for k in block if k not in CONFIG_KEYS)
        if unknown:
            raise PlacementError(
                f"split_placement has unknown key(s) {', '.join(unknown)}; it accepts {', '.join(CONFIG_KEYS)}."
            )
        if "placement" in block and "groups" in block:
            raise PlacementError(
                "split_placement sets both 'placement' and 'groups'. Keep one: a shorthand in 'placement', "
                "or a list of {roles, gpus} in 'groups'."
            )
        if "groups" in block:
            groups = block["groups"]
            if not isinstance(groups, list):
                raise PlacementError(
                    f"split_placement.groups must be a list of {{roles, gpus}} mappings, got {groups!r}."
                )
            return parse_placement(groups, source="split_placement.groups")
        if "placement" in block:
            return parse_placement(block["placement"], source="split_placement.placement")
    if env_value is not None and env_value.strip():
        return parse_placement(env_value, source="VERL_SPLIT_PLACEMENT")
    return parse_placement(DEFAULT_PLACEMENT, source="default placement")


def cluster_from_config(config: Job | Any) -> Cluster:
    trainer = as_job(config).trainer
    return Cluster(nnodes=trainer.nnodes, n_gpus_per_node=trainer.n_gpus_per_node)


def ready_timeout_from_config(config: Job | Any) -> float:
    """``split_placement.ready_timeout_s``: seconds to wait for the pools' placement groups (checked as the block
    was read: a number above 0)."""
    value = split_from_config(config).ready_timeout_s
    return DEFAULT_READY_TIMEOUT_S if value is None else value


def shared_rollout_from_config(config: Job | Any, env_value: bool | None = None) -> bool:
    """Rollout on both pools: ``split_placement.shared_rollout`` wins over ``VERL_SPLIT_SHARED_ROLLOUT``.

    The same order as the placement's (``placement_from_config``): the run's own config over the
    shell's variable. ``env_value`` is the variable's value; None reads the frozen settings.
    Reads the ``split_placement`` block alone: the runtime asks this of the trainer's config.
    """
    return _shared_rollout(split_from_config(config), env_value)


def _shared_rollout(split: Split, env_value: bool | None) -> bool:
    if split.shared_rollout is not None:
        return split.shared_rollout  # read as true or false with the block (job_config.split_from_config)
    if env_value is None:
        from verl_split.core import settings

        env_value = settings.current().shared_rollout
    return env_value


def check_shared_rollout_run(config: Job | Any) -> None:
    """What shared rollout needs beyond the placement: a release that has it, the v1 trainer in ``sync`` mode
    (``RayPPOTrainer`` has no modes; a subclass with a loop of its own is refused where it starts, in
    ``runtime/shared_rollout/hooks.check_ray_trainer``), merged LoRA.

    The placement's own part (a critic pool holding whole replicas) is ``plan_placement``'s.
    """
    from verl_split.core import compat

    version = compat.installed_version()
    # No verl here (a laptop planning a cluster's layout): nothing to check against.
    if version is not None and not compat.verl_in(compat.SHARED_ROLLOUT):
        raise PlacementError(
            f"shared rollout is not on this release (verl {version}): it needs the rollout servers' load balancer "
            f"with run-time server registration and the checkpoint engine, which arrived in verl 0.8; upgrade to "
            f"verl 0.8 or newer, or {SWITCH_OFF_HINT}."
        )
    job = as_job(config)
    # verl's one-step-off and fully-async recipes (verl/experimental/*/ray_trainer.py, subclasses of RayPPOTrainer
    # with an init_workers and fit of their own) assert hybrid_engine=false: their rollout is not the actor's.
    if not job.rollout.hybrid:
        raise PlacementError(
            "shared rollout adds rollout replicas beside the actor's hybrid ones; this run sets "
            "actor_rollout_ref.hybrid_engine=false (verl's one-step-off and fully-async recipes), whose trainer "
            f"schedules its own rollout replicas and their weight sync. Drop that override, or {SWITCH_OFF_HINT}."
        )
    # On RayPPOTrainer (trainer.use_v1=false) there is no trainer_mode: the runtime checks its loop instead.
    mode = job.trainer.v1_mode
    if job.trainer.use_v1 and mode not in SHARED_ROLLOUT_TRAINER_MODES:
        raise PlacementError(
            f"shared rollout runs with trainer.v1.trainer_mode={' or '.join(SHARED_ROLLOUT_TRAINER_MODES)} for "
            f"now; this run sets trainer.v1.trainer_mode={mode}, whose trainer schedules its rollout replicas "
            f"and their weight sync itself. Set trainer.v1.trainer_mode=sync, or {SWITCH_OFF_HINT}."
        )
    # The weights reach replicas on other GPUs through verl's checkpoint engine, whose path
    # (verl/workers/engine_workers.py update_weights, mode other than "naive") drops the LoRA
    # peft_config: only merged weights arrive whole.
    model = job.actor.model
    if model.lora_rank > 0 and not model.lora_merge:
        raise PlacementError(
            f"shared rollout sends the actor's weights to replicas on the critic pool's GPUs, and that transfer "
            f"carries full weights only, not a LoRA adapter; this run trains LoRA (rank {model.lora_rank}) unmerged "
            f"({model.prefix}.lora.merge=false). Set {model.prefix}.lora.merge=true, or {SWITCH_OFF_HINT}."
        )


def plan_from_config(
    config: Job | Any,
    env_value: str | None = None,
    shared_rollout: bool | None = None,
    gpu_gb: float | None = None,
) -> Plan:
    """Plan the run of a verl config (or its job's view, read once here otherwise).

    ``env_value`` is VERL_SPLIT_PLACEMENT and ``shared_rollout`` VERL_SPLIT_SHARED_ROLLOUT (the
    frozen settings' when None); the config's ``split_placement`` keys win over both. With shared
    rollout the critic pool's memory is estimated (``placement.memory``) against ``gpu_gb``, else the
    GPUs ``nvidia-smi`` shows on this node, and refused when it cannot fit.
    """
    job = as_job(config)
    if env_value is None:
        from verl_split.core import settings

        env_value = settings.current().placement
    shared = _shared_rollout(job.split, shared_rollout)
    if shared:
        check_shared_rollout_run(job)
    requirements = requirements_from_config(job)
    plan = plan_placement(
        placement_from_config(job, env_value), cluster_from_config(job), requirements, shared_rollout=shared
    )
    plan = dataclasses.replace(plan, ready_timeout_s=ready_timeout_from_config(job))
    note = ulysses_note(job, requirements.family or job.family)
    if note:
        plan = dataclasses.replace(plan, notes=(*plan.notes, note))
    if shared:
        plan = memory.with_memory_estimate(plan, job, gpu_gb if gpu_gb is not None else memory.detect_gpu_gb(), None)
    return plan
