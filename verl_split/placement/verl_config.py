"""Read a placement's inputs from verl's trainer config: the only module that knows verl's config keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from verl_split.core.errors import PlacementError, SettingsError
from verl_split.placement import megatron, memory
from verl_split.placement.config_keys import select_key
from verl_split.placement.megatron_config import meshes_from_config, uses_reference
from verl_split.placement.model import DEFAULT_READY_TIMEOUT_S, Cluster, ParallelSize, Placement, Plan, Requirements
from verl_split.placement.parse import DEFAULT_PLACEMENT, parse_placement
from verl_split.placement.planner import plan_placement
from verl_split.placement.shared import SWITCH_OFF_HINT

#: Keys accepted in the ``split_placement`` config block.
CONFIG_KEYS: tuple[str, ...] = ("placement", "groups", "ready_timeout_s", "shared_rollout")
#: ``trainer.v1.trainer_mode`` values shared rollout runs under: the asynchronous modes
#: (colocate_async, separate_async) schedule generation and weight sync their own way.
SHARED_ROLLOUT_TRAINER_MODES: tuple[str, ...] = ("sync",)


def _size(config: Any, key: str, default: int = 1) -> int:
    value = select_key(config, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


#: Where each role's FSDP engine block lives, per verl family. The critic's moved: verl 0.7's
#: legacy ``CriticWorker`` reads ``critic.model.fsdp_config.fsdp_size`` (``verl/workers/fsdp_workers.py``),
#: 0.8 and 0.9 name the block ``critic.fsdp``. A config has one of the two; the other reads as 1.
_FSDP_BLOCKS: dict[str, tuple[str, ...]] = {
    "actor": ("fsdp_config",),
    "ref": ("fsdp_config",),
    "critic": ("fsdp", "model.fsdp_config"),
}


def requirements_from_config(config: Any, family: str | None = None) -> Requirements:
    """Read what a placement must satisfy from verl's (OmegaConf or dict) trainer config.

    ``family``: whose batch rules apply ("0.7", "0.8", "0.9"); None reads the installed verl's.
    """
    from verl_split.placement.batch_config import FAMILIES, batch_from_config, installed_family, rules_of, ulysses_keys

    # The critic rule of verl/trainer/ppo/utils.py need_critic, restated so that this module
    # imports no verl: critic.enable decides when set, else the advantage estimator is GAE.
    enable = select_key(config, "critic.enable")
    estimator = str(select_key(config, "algorithm.adv_estimator", "gae"))
    if enable is not None:
        critic, reason = bool(enable), f"critic.enable={bool(enable)}"
    else:
        critic, reason = estimator.lower() == "gae", f"algorithm.adv_estimator={estimator}"
    reward_enabled = bool(select_key(config, "reward.reward_model.enable", False))
    own_pool = bool(select_key(config, "reward.reward_model.enable_resource_pool", False))

    parallel: list[ParallelSize] = []
    rollout = "actor_rollout_ref.rollout"
    replica = (
        _size(config, f"{rollout}.tensor_model_parallel_size")
        * _size(config, f"{rollout}.data_parallel_size")
        * _size(config, f"{rollout}.pipeline_model_parallel_size")
    )
    # A rollout replica is tp * dp * pp GPUs (verl/workers/rollout/replica.py RolloutReplica.world_size).
    parallel.append(
        ParallelSize("rollout", replica, f"{rollout}.tensor_model_parallel_size x data x pipeline", within_node=True)
    )
    known = family or installed_family() or FAMILIES[-1]
    rules = rules_of(config, known if known in FAMILIES else FAMILIES[-1] if known > FAMILIES[-1] else FAMILIES[0])
    for role, prefix in (
        ("actor", "actor_rollout_ref.actor"),
        ("ref", "actor_rollout_ref.ref"),
        ("critic", "critic"),
    ):
        if role == "critic" and not critic:
            continue
        keys = [*ulysses_keys(role, rules), *(f"{prefix}.{block}.fsdp_size" for block in _FSDP_BLOCKS[role])]
        parallel.extend(ParallelSize(role, _size(config, key), key) for key in keys)
        if str(select_key(config, f"{prefix}.strategy", "")) == "megatron":
            mega = f"{prefix}.megatron"
            size = (
                _size(config, f"{mega}.tensor_model_parallel_size")
                * _size(config, f"{mega}.pipeline_model_parallel_size")
                * _size(config, f"{mega}.context_parallel_size")
            )
            key = f"{mega}.tensor_model_parallel_size x pipeline x context"
            parallel.append(ParallelSize(role, size, key, cite=megatron.MODEL_SIZE_CITE))
    if reward_enabled and not own_pool:
        rm = "reward.reward_model.rollout"
        size = (
            _size(config, f"{rm}.tensor_model_parallel_size")
            * _size(config, f"{rm}.data_parallel_size")
            * _size(config, f"{rm}.pipeline_model_parallel_size")
        )
        parallel.append(ParallelSize("reward", size, f"{rm}.tensor_model_parallel_size x data x pipeline", True))
    batch = batch_from_config(config, family)
    roles = ("actor", "ref", "critic") if critic else ("actor", "ref")
    return Requirements(
        critic=critic,
        critic_reason=reason,
        reward=reward_enabled and not own_pool,
        reward_own_pool=reward_enabled and own_pool,
        parallel=tuple(p for p in parallel if p.size > 1),
        batch=batch,
        megatron=meshes_from_config(config, tuple(r for r in roles if r != "ref" or uses_reference(config))),
        family=batch.family if batch is not None else family or installed_family() or FAMILIES[-1],
    )


def placement_from_config(config: Any, env_value: str | None = None) -> Placement:
    """The run's placement: ``split_placement`` in the config wins over ``VERL_SPLIT_PLACEMENT``.

    The config is the run's own, recorded setting (hydra logs it with the run); the environment
    variable is a default for every run of a shell, so the more specific one wins.
    """
    block = select_key(config, "split_placement")
    if block is not None:
        block = _plain(block)
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
            groups = _plain(block["groups"])
            if not isinstance(groups, list):
                raise PlacementError(
                    f"split_placement.groups must be a list of {{roles, gpus}} mappings, got {groups!r}."
                )
            return parse_placement(groups, source="split_placement.groups")
        if "placement" in block:
            return parse_placement(_plain(block["placement"]), source="split_placement.placement")
    if env_value is not None and env_value.strip():
        return parse_placement(env_value, source="VERL_SPLIT_PLACEMENT")
    return parse_placement(DEFAULT_PLACEMENT, source="default placement")


def _plain(value: Any) -> Any:
    """An OmegaConf container as plain lists and dicts, interpolations resolved; anything else as is."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def cluster_from_config(config: Any) -> Cluster:
    nnodes = select_key(config, "trainer.nnodes")
    per_node = select_key(config, "trainer.n_gpus_per_node")
    return Cluster(nnodes=nnodes, n_gpus_per_node=per_node)


def ready_timeout_from_config(config: Any) -> float:
    """``split_placement.ready_timeout_s``: seconds to wait for the pools' placement groups."""
    value = select_key(config, "split_placement.ready_timeout_s", DEFAULT_READY_TIMEOUT_S)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise PlacementError(
            f"split_placement.ready_timeout_s must be a number of seconds above 0, got {value!r}. "
            f"Leave it out for the default ({DEFAULT_READY_TIMEOUT_S:g}s)."
        )
    return float(value)


def shared_rollout_from_config(config: Any, env_value: bool | None = None) -> bool:
    """Rollout on both pools: ``split_placement.shared_rollout`` wins over ``VERL_SPLIT_SHARED_ROLLOUT``.

    The same order as the placement's (``placement_from_config``): the run's own config over the
    shell's variable. ``env_value`` is the variable's value; None reads the frozen settings.
    """
    value = select_key(config, "split_placement.shared_rollout")
    if value is None:
        if env_value is None:
            from verl_split.core import settings

            env_value = settings.current().shared_rollout
        return env_value
    if isinstance(value, bool):
        return value
    # Hydra reads `=1` as an int and `=yes` as a string: take the spellings the variable takes.
    if isinstance(value, (int, str)):
        from verl_split.core import settings

        try:
            return settings.parse_switch("split_placement.shared_rollout", str(value), False)
        except SettingsError:
            pass
    raise PlacementError(
        f"split_placement.shared_rollout must be true or false, got {value!r}. Set "
        "+split_placement.shared_rollout=true to put rollout replicas on the critic pool too, or false (or leave "
        "it out) to generate on the actor's pool only."
    )


def check_shared_rollout_run(config: Any) -> None:
    """What shared rollout needs beyond the placement: a release that has it, the v1 trainer in ``sync`` mode
    (``RayPPOTrainer`` has no modes; a subclass with a loop of its own is refused where it starts, in
    ``runtime/shared_rollout/ray_trainer.check_ray_trainer``), merged LoRA.

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
    # verl's one-step-off and fully-async recipes (verl/experimental/*/ray_trainer.py, subclasses of RayPPOTrainer
    # with an init_workers and fit of their own) assert hybrid_engine=false: their rollout is not the actor's.
    if select_key(config, "actor_rollout_ref.hybrid_engine", True) is False:
        raise PlacementError(
            "shared rollout adds rollout replicas beside the actor's hybrid ones; this run sets "
            "actor_rollout_ref.hybrid_engine=false (verl's one-step-off and fully-async recipes), whose trainer "
            f"schedules its own rollout replicas and their weight sync. Drop that override, or {SWITCH_OFF_HINT}."
        )
    # On RayPPOTrainer (trainer.use_v1=false) there is no trainer_mode: the runtime checks its loop instead.
    v1 = select_key(config, "trainer.use_v1", True) is not False
    mode = str(select_key(config, "trainer.v1.trainer_mode", "sync"))
    if v1 and mode not in SHARED_ROLLOUT_TRAINER_MODES:
        raise PlacementError(
            f"shared rollout runs with trainer.v1.trainer_mode={' or '.join(SHARED_ROLLOUT_TRAINER_MODES)} for "
            f"now; this run sets trainer.v1.trainer_mode={mode}, whose trainer schedules its rollout replicas "
            f"and their weight sync itself. Set trainer.v1.trainer_mode=sync, or {SWITCH_OFF_HINT}."
        )
    # The weights reach replicas on other GPUs through verl's checkpoint engine, whose path
    # (verl/workers/engine_workers.py update_weights, mode other than "naive") drops the LoRA
    # peft_config: only merged weights arrive whole.
    model = "actor_rollout_ref.model"
    rank = max(_size(config, f"{model}.lora_rank", 0), _size(config, f"{model}.lora.rank", 0))
    if rank > 0 and not select_key(config, f"{model}.lora.merge", False):
        raise PlacementError(
            f"shared rollout sends the actor's weights to replicas on the critic pool's GPUs, and that transfer "
            f"carries full weights only, not a LoRA adapter; this run trains LoRA (rank {rank}) unmerged "
            f"({model}.lora.merge=false). Set {model}.lora.merge=true, or {SWITCH_OFF_HINT}."
        )


def plan_from_config(
    config: Any,
    env_value: str | None = None,
    shared_rollout: bool | None = None,
    gpu_gb: float | None = None,
) -> Plan:
    """Plan the run of a verl config.

    ``env_value`` is VERL_SPLIT_PLACEMENT and ``shared_rollout`` VERL_SPLIT_SHARED_ROLLOUT (the
    frozen settings' when None); the config's ``split_placement`` keys win over both. With shared
    rollout the critic pool's memory is estimated (``placement.memory``) against ``gpu_gb``, else the
    GPUs ``nvidia-smi`` shows on this node, and refused when it cannot fit.
    """
    if env_value is None:
        from verl_split.core import settings

        env_value = settings.current().placement
    shared = shared_rollout_from_config(config, shared_rollout)
    if shared:
        check_shared_rollout_run(config)
    from verl_split.placement.batch_config import ignored_ulysses_note

    requirements = requirements_from_config(config)
    plan = plan_placement(
        placement_from_config(config, env_value), cluster_from_config(config), requirements, shared_rollout=shared
    )
    plan = dataclasses.replace(plan, ready_timeout_s=ready_timeout_from_config(config))
    note = ignored_ulysses_note(config, requirements.family)
    if note:
        plan = dataclasses.replace(plan, notes=(*plan.notes, note))
    if shared:
        plan = memory.with_memory_estimate(plan, config, gpu_gb if gpu_gb is not None else memory.detect_gpu_gb(), None)
    return plan
