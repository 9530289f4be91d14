"""Read a placement's inputs from verl's trainer config: the only module that knows verl's config keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from verl_split.errors import PlacementError
from verl_split.placement.model import DEFAULT_READY_TIMEOUT_S, Cluster, ParallelSize, Placement, Plan, Requirements
from verl_split.placement.parse import DEFAULT_PLACEMENT, parse_placement
from verl_split.placement.planner import plan_placement

#: Keys accepted in the ``split_placement`` config block.
CONFIG_KEYS: tuple[str, ...] = ("placement", "groups", "ready_timeout_s")


def select_key(config: Any, dotted: str, default: Any = None) -> Any:
    """``config.a.b.c`` of an OmegaConf config or nested dicts; ``default`` when a part is missing or None.

    For OmegaConf, ``OmegaConf.select``: a missing key or a ``???`` value gives ``default``, but an
    interpolation that cannot be resolved (``${oc.env:NNODES}`` with NNODES unset) raises a
    PlacementError naming the key and the cause, instead of a misleading "got None" later.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigTypeError, GrammarParseError, InterpolationResolutionError

    if isinstance(config, DictConfig):
        try:
            value = OmegaConf.select(config, dotted, default=None, throw_on_missing=False)
        except ConfigTypeError:  # a path through a leaf or a list ('a.c' where a is 3): not there
            return default
        except (InterpolationResolutionError, GrammarParseError) as exc:
            raise PlacementError(
                f"could not read {dotted} from verl's config: {type(exc).__name__}: {str(exc).splitlines()[0]}. "
                "Fix that value (set the environment variable it reads, or set the key on the command line)."
            ) from exc
        return default if value is None else value
    node = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return default if node is None else node


def _size(config: Any, key: str) -> int:
    value = select_key(config, key, 1)
    if isinstance(value, bool) or not isinstance(value, int):
        return 1
    return value


#: Where each role's FSDP engine block lives, per verl family. The critic's moved: verl 0.7's
#: legacy ``CriticWorker`` reads ``critic.model.fsdp_config.fsdp_size`` (``verl/workers/fsdp_workers.py``),
#: 0.8 and 0.9 name the block ``critic.fsdp``. A config has one of the two; the other reads as 1.
_FSDP_BLOCKS: dict[str, tuple[str, ...]] = {
    "actor": ("fsdp_config",),
    "ref": ("fsdp_config",),
    "critic": ("fsdp", "model.fsdp_config"),
}


def requirements_from_config(config: Any) -> Requirements:
    """Read what a placement must satisfy from verl's (OmegaConf or dict) trainer config."""
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
    for role, prefix in (
        ("actor", "actor_rollout_ref.actor"),
        ("ref", "actor_rollout_ref.ref"),
        ("critic", "critic"),
    ):
        if role == "critic" and not critic:
            continue
        keys = [f"{prefix}.ulysses_sequence_parallel_size"]
        for block in _FSDP_BLOCKS[role]:
            keys += [f"{prefix}.{block}.ulysses_sequence_parallel_size", f"{prefix}.{block}.fsdp_size"]
        parallel.extend(ParallelSize(role, _size(config, key), key) for key in keys)
        if str(select_key(config, f"{prefix}.strategy", "")) == "megatron":
            mega = f"{prefix}.megatron"
            size = (
                _size(config, f"{mega}.tensor_model_parallel_size")
                * _size(config, f"{mega}.pipeline_model_parallel_size")
                * _size(config, f"{mega}.context_parallel_size")
            )
            parallel.append(ParallelSize(role, size, f"{mega}.tensor_model_parallel_size x pipeline x context"))
    if reward_enabled and not own_pool:
        rm = "reward.reward_model.rollout"
        size = (
            _size(config, f"{rm}.tensor_model_parallel_size")
            * _size(config, f"{rm}.data_parallel_size")
            * _size(config, f"{rm}.pipeline_model_parallel_size")
        )
        parallel.append(ParallelSize("reward", size, f"{rm}.tensor_model_parallel_size x data x pipeline", True))
    return Requirements(
        critic=critic,
        critic_reason=reason,
        reward=reward_enabled and not own_pool,
        reward_own_pool=reward_enabled and own_pool,
        parallel=tuple(p for p in parallel if p.size > 1),
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


def plan_from_config(config: Any, env_value: str | None = None) -> Plan:
    """Plan the run of a verl config; ``env_value`` is VERL_SPLIT_PLACEMENT (the frozen settings' if None)."""
    if env_value is None:
        from verl_split import settings

        env_value = settings.current().placement
    plan = plan_placement(
        placement_from_config(config, env_value), cluster_from_config(config), requirements_from_config(config)
    )
    return dataclasses.replace(plan, ready_timeout_s=ready_timeout_from_config(config))
