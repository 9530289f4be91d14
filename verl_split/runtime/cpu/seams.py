"""The CPU dry run's seams (``VERL_SPLIT_CPU``): ``engine_hooks.py`` and ``trainer_hooks.py`` say why each.

verl 0.9 has a platform registry; 0.7/0.8 get the CPU device module and engine entries directly.
"""

from __future__ import annotations

from verl_split.core import compat
from verl_split.plugin.seam import Seam, Wrap
from verl_split.runtime.attention.seams import critic_attention_seam
from verl_split.runtime.placement.seams import runtime_env_seam

_ENGINE = "verl_split.runtime.cpu.engine_hooks:"
_TRAINER = "verl_split.runtime.cpu.trainer_hooks:"
#: runtime/cpu/rollout.py: the CPU rollout's replica and server.
_ROLLOUT_NEEDS = (
    "verl.workers.rollout.base:BaseRollout",
    "verl.workers.rollout.replica:RolloutReplica",
    "verl.workers.rollout.replica:TokenOutput",
)
_OFFLOAD = (Wrap("CPUOffloadPolicy", _ENGINE + "wrap_cpu_offload_policy"),)


def _cpu(name: str, target: str, verl, needs: tuple, **what) -> Seam:
    return Seam(name, target, "cpu", "cpu", verl, needs=needs, **what)


SEAMS: tuple[Seam, ...] = (
    runtime_env_seam("cpu_runtime_env", "cpu", "cpu"),
    _cpu(
        "cpu_platform",
        "verl.plugin.platform.platform_manager",
        compat.PLATFORM_REGISTRY,
        (
            "PlatformRegistry.register",
            "PlatformRegistry.get",
            "PlatformRegistry._platforms",
            "verl.plugin.platform.platform_base:PlatformBase",
            "verl.plugin.platform:get_platform",
        ),
        apply=_TRAINER + "register_platform",
    ),
    _cpu(
        "cpu_device",
        "verl.utils.device",
        compat.BEFORE_V1,
        ("get_torch_device", "get_device_name"),
        wraps=(Wrap("get_torch_device", _TRAINER + "wrap_get_torch_device"),),
        apply=_TRAINER + "rebind_get_torch_device",
    ),
    _cpu(
        "cpu_engine_registry",
        "verl.workers.engine.fsdp.transformer_impl",
        compat.BEFORE_V1,
        ("EngineRegistry._engines",),
        apply=_ENGINE + "register_cpu_engines",
    ),
    _cpu(
        "cpu_attention",
        "verl.utils.attention_utils",
        compat.NO_ATTENTION_FALLBACK,
        ("_get_attention_functions",),
        wraps=(Wrap("_get_attention_functions", _ENGINE + "wrap_get_attention_functions"),),
    ),
    _cpu(
        "cpu_file_logger",
        "verl.utils.tracking",
        compat.PLAIN_JSON_FILE_LOGGER,
        ("FileLogger.log(data@0, step@1)",),
        wraps=(Wrap("FileLogger.log", _TRAINER + "wrap_file_logger_log"),),
    ),
    _cpu(
        "cpu_legacy_workers",
        "verl.workers.fsdp_workers",
        compat.LEGACY_WORKERS,
        (
            "ActorRolloutRefWorker.__init__(config@0)",
            "CriticWorker.__init__(config@0)",
            "verl.utils.distributed:initialize_global_process_group_ray(timeout_second)",
        ),
        wraps=(
            Wrap("ActorRolloutRefWorker.__init__", _ENGINE + "wrap_legacy_worker_init"),
            Wrap("CriticWorker.__init__", _ENGINE + "wrap_legacy_worker_init"),
        ),
    ),
    _cpu(
        "cpu_distributed",
        "verl.utils.distributed",
        compat.ANY,
        # backend: 0.7.1+ (0.7.0 has none: the wrapper starts gloo itself then).
        ("initialize_global_process_group_ray(timeout_second@0)",),
        wraps=(Wrap("initialize_global_process_group_ray", _ENGINE + "wrap_initialize_global_process_group_ray"),),
    ),
    _cpu("cpu_fsdp", "verl.workers.engine.fsdp.transformer_impl", compat.ANY, ("CPUOffloadPolicy",), wraps=_OFFLOAD),
    _cpu("cpu_fsdp_legacy", "verl.workers.fsdp_workers", compat.LEGACY_WORKERS, ("CPUOffloadPolicy",), wraps=_OFFLOAD),
    # The critic with its configured attention (runtime/attention/), on any device: the demo's stock run has
    # VERL_SPLIT_CPU without VERL_SPLIT, on the CPU or on a GPU without flash-attn.
    critic_attention_seam("cpu_critic_attention", "cpu", "cpu"),
    _cpu(
        "cpu_rollout_worker",
        "verl.workers.rollout.base",
        compat.ANY,
        ("_ROLLOUT_REGISTRY", *_ROLLOUT_NEEDS),
        apply=_TRAINER + "register_worker_rollout",
    ),
    _cpu(
        "cpu_rollout_replica",
        "verl.workers.rollout.replica",
        compat.ANY,
        ("RolloutReplicaRegistry.register", "RolloutReplicaRegistry._registry", *_ROLLOUT_NEEDS),
        apply=_TRAINER + "register_replica_rollout",
    ),
    _cpu(
        "cpu_ulysses_attention",
        "transformers.modeling_utils",
        compat.ANY,
        (
            "AttentionInterface",  # a GeneralInterface (transformers/utils/generic.py) with its entries
            "transformers.utils.generic:GeneralInterface.register",
            "transformers.utils.generic:GeneralInterface._global_mapping",
            "verl.utils.ulysses:gather_seq_scatter_heads(x@0, seq_dim, head_dim)",
            "verl.utils.ulysses:gather_heads_scatter_seq(x@0, head_dim, seq_dim)",
            "verl.utils.ulysses:get_ulysses_sequence_parallel_world_size",
            "verl.utils.ulysses:get_ulysses_sequence_parallel_group",
        ),
        apply="verl_split.runtime.cpu.ulysses:install",
    ),
    _cpu(
        "cpu_replay_poll",
        "verl.trainer.ppo.v1.replay_buffer",
        compat.V1_TRAINER,
        ("ReplayBuffer.__init__(poll_interval)", "ReplayBuffer.poll_interval"),
        wraps=(Wrap("ReplayBuffer.__init__", _TRAINER + "wrap_replay_buffer_init"),),
    ),
)
