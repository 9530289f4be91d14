"""Switch verl-split's patches on and off in this process.

Each patch is a *seam*: a module in ``verl_split.seams`` with ``patch(module)`` and
``unpatch(module)`` for one verl module (its target). Seams are registered here by
name, as wrapt post-import hooks, so a seam's code loads only once its target is
imported, and import order does not matter (patch before or after ``import verl``).

A seam's row in ``SEAMS`` (one line each, so the table can move to data as it is)::

    Seam(name, target, module, switch, verl, part=..., needs=(...))

* ``switch``: ``"split"`` (``VERL_SPLIT``) or ``"cpu"`` (``VERL_SPLIT_CPU``) registers it;
* ``verl``: the releases it applies to, one of ``compat``'s named ranges;
* ``part``: the feature it belongs to, a key of ``preflight.FEATURES`` (``placement``, ``updates``, ``prep``,
  ``shared_rollout``, ``cpu``); default ``placement`` for ``split``, ``cpu`` for ``cpu``;
* ``needs``: every verl name the seam (and the code it calls) wraps or reads, in ``preflight``'s little
  language: ``[module:]Name[.attr](param, param@index)``, module defaulting to ``target``; a leading
  ``?`` makes a need optional (checked only where verl has it). The preflight is derived from these rows
  alone: a seam added here with its needs is checked before Ray starts, and in ``verl-split doctor``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import sys
from dataclasses import dataclass, field
from types import ModuleType

import wrapt
from packaging.specifiers import SpecifierSet

from verl_split import compat, log, preflight, settings
from verl_split.errors import VerlSplitError, activation_failed

logger = logging.getLogger("verl_split")


@dataclass(frozen=True)
class Seam:
    name: str
    target: str  # the verl module whose import triggers the patch
    module: str  # the verl_split module holding patch() / unpatch()
    feature: str  # "split" (VERL_SPLIT) or "cpu" (VERL_SPLIT_CPU): the switch that registers it
    verl: SpecifierSet  # the verl releases this seam applies to: one of compat's named ranges
    part: str = ""  # the preflight's feature (preflight.FEATURES); default: placement / cpu
    needs: tuple[str, ...] = field(default=())  # what it wraps and reads in verl (preflight's language)

    def __post_init__(self) -> None:
        if not self.part:
            object.__setattr__(self, "part", "cpu" if self.feature == "cpu" else "placement")

    def applies_to(self, family: str | None = None) -> bool:
        """True for the installed verl, or for release family ``family`` (``"0.8"``)."""
        return compat.verl_in(self.verl) if family is None else self.verl.contains(family, prereleases=True)


#: Seams whose verl target is the same in every supported release.
ALL_FAMILIES = compat.ANY

# What the seams' shared code reads in verl; each seam that runs that code lists it in its needs.
#: verl 0.7.1 moved ResourcePoolManager to single_controller/ray/base.py; 0.7.0 has it in ray_trainer.py:70.
_RPM = "verl.single_controller.ray.base|verl.trainer.ppo.ray_trainer:ResourcePoolManager"
_POOL = "verl.single_controller.ray.base:RayResourcePool"
#: verl_split/pools.py: a ResourcePoolManager subclass and a node-pinned RayResourcePool (bundle shape copied).
_POOL_NEEDS = (
    f"{_RPM}(resource_pool_spec, mapping)",
    f"{_RPM}.resource_pool_spec",
    f"{_RPM}.mapping",
    f"?{_RPM}.max_colocate_count",  # 0.7 hard-codes 3 (pools.py reads it with a default)
    f"{_RPM}.resource_pool_dict",
    f"{_RPM}.create_resource_pool",
    f"{_RPM}.get_resource_pool",
    f"{_POOL}(process_on_nodes, use_gpu, name_prefix, max_colocate_count, detached, accelerator_type)",
    f"{_POOL}.get_placement_groups",
    f"{_POOL}.pgs",
    f"{_POOL}._store",
    "verl.trainer.ppo.utils:Role.Critic",
    "verl.trainer.ppo.utils:Role.ActorRollout",
    "verl.trainer.ppo.utils:Role.ActorRolloutRef",
)
_V1 = "PPOTrainer."  # verl/trainer/ppo/v1/trainer_base.py
_V0 = "RayPPOTrainer."  # verl/trainer/ppo/ray_trainer.py
#: verl_split/trainers.py and overlap.py: what the update overlap reads of a trainer.
_UPDATE_NEEDS = ("config", "global_steps", "critic_wg", "resource_pool_manager")
#: verl_split/shared_rollout.py, imported only when shared rollout is on.
_LLM = "verl.workers.rollout.llm_server:"
_REPLICA = "verl.workers.rollout.replica:RolloutReplica"
_CEM = "verl.checkpoint_engine.base:CheckpointEngineManager"
_SHARED_ROLLOUT_NEEDS = (
    f"{_V1}_setup",
    f"{_V1}_validate",
    f"{_V1}llm_server_manager",
    f"{_V1}checkpoint_manager",
    f"{_V1}actor_rollout_wg",
    f"{_V1}resource_pool_manager",
    f"{_V1}_pending_sync_metrics",
    f"{_LLM}GlobalRequestLoadBalancer(servers, full_determinism)",
    f"{_LLM}GlobalRequestLoadBalancer.acquire_server(request_id@0)",
    f"{_LLM}GlobalRequestLoadBalancer.add_servers(servers)",
    f"{_LLM}LLMServerManager.rollout_replica_class",
    f"{_LLM}LLMServerManager.rollout_config",
    f"{_LLM}LLMServerManager.model_config",
    f"{_LLM}LLMServerManager.server_addresses",
    f"{_LLM}LLMServerManager.server_handles",
    f"{_LLM}LLMServerManager.global_load_balancer",
    f"{_LLM}LLMServerManager.get_replicas",
    f"{_REPLICA}(replica_rank, config, model_config, gpus_per_node)",
    f"{_REPLICA}.init_colocated",
    f"{_REPLICA}.world_size",
    f"{_REPLICA}.server_address",
    f"{_REPLICA}.server_handle",
    f"{_REPLICA}.servers",
    f"{_CEM}(config, actor_wg, replicas)",
    f"{_CEM}.update_weights(global_steps)",
    f"{_CEM}.sleep_replicas",
    f"{_CEM}.wake_up_replicas",
    f"{_CEM}.abort_replicas",
    f"{_CEM}.resume_generation_replicas",
    f"{_CEM}.release_kv_cache_replicas",
    f"{_CEM}.resume_kv_cache_replicas",
    f"{_CEM}.replicas",
    "verl.single_controller.ray.base:split_resource_pool",
    "verl.utils.ray_utils:auto_await",
    "verl.utils.config:omega_conf_to_dataclass",
)
#: verl_split/cpu/rollout.py: the CPU rollout's replica and server.
_CPU_ROLLOUT_NEEDS = (
    "verl.workers.rollout.base:BaseRollout",
    "verl.workers.rollout.replica:RolloutReplica",
    "verl.workers.rollout.replica:TokenOutput",
)

#: Every seam verl-split patches, per feature and verl release family.
SEAMS: tuple[Seam, ...] = (
    Seam(
        "runtime_env",
        "verl.trainer.constants_ppo",
        "verl_split.seams.runtime_env",
        "split",
        ALL_FAMILIES,
        needs=("get_ppo_ray_runtime_env",),
    ),
    # Split placement: validate in the launching process, then apply in the trainer (v1) / TaskRunner (v0);
    # on 0.7/0.8 the TaskRunner is main_ppo's __main__, so in RayPPOTrainer's constructor.
    Seam(
        "placement_check",
        "verl.utils.device",
        "verl_split.seams.placement_check",
        "split",
        ALL_FAMILIES,
        needs=("auto_set_device(config@0)",),
    ),
    Seam(
        "placement_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "verl_split.seams.placement_v1",
        "split",
        compat.V1_TRAINER,
        needs=(f"{_V1}_init_resource_pool_mgr", f"{_V1}resource_pool_manager", f"{_V1}config", *_POOL_NEEDS),
    ),
    Seam(
        "placement_v0",
        "verl.trainer.main_ppo_v0",
        "verl_split.seams.placement_v0",
        "split",
        compat.V1_TRAINER,
        needs=("BaseTaskRunner.init_resource_pool_mgr(config@0)", "TaskRunner", *_POOL_NEEDS),
    ),
    Seam(
        "placement_legacy",
        "verl.trainer.ppo.ray_trainer",
        "verl_split.seams.placement_legacy",
        "split",
        compat.BEFORE_V1,
        needs=(f"{_V0}__init__", f"{_V0}resource_pool_manager", f"{_V0}config", *_POOL_NEEDS),
    ),
    # Concurrent actor and critic updates (verl_split/overlap.py); 0.7's legacy critic: verl_split/legacy.py.
    Seam(
        "overlap_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "verl_split.seams.overlap_v1",
        "split",
        compat.V1_TRAINER,
        part="updates",
        needs=(
            f"{_V1}_update_critic(batch@0, metrics@1)",
            f"{_V1}_update_actor(batch@0, metrics@1)",
            f"{_V1}_step_once",
            *(_V1 + a for a in _UPDATE_NEEDS),
            "verl.workers.engine_workers:TrainingWorker.train_mini_batch",
        ),
    ),
    Seam(
        "overlap_v0",
        "verl.trainer.ppo.ray_trainer",
        "verl_split.seams.overlap_v0",
        "split",
        compat.ENGINE_WORKERS,
        part="updates",
        needs=(
            f"{_V0}_update_critic(batch@0)",
            f"{_V0}_update_actor(batch@0)",
            f"{_V0}fit",
            *(_V0 + a for a in _UPDATE_NEEDS),
            "verl.workers.engine_workers:TrainingWorker.train_mini_batch",
        ),
    ),
    Seam(
        "overlap_legacy",
        "verl.trainer.ppo.ray_trainer",
        "verl_split.seams.overlap_legacy",
        "split",
        compat.LEGACY_WORKERS,
        part="updates",
        needs=(
            f"{_V0}_update_critic(batch@0)",
            f"{_V0}_update_actor(batch@0)",
            f"{_V0}fit",
            *(_V0 + a for a in _UPDATE_NEEDS),
            "verl.protocol:DataProto",
        ),
    ),
    # values beside old_log_prob + ref (verl_split/prep_overlap.py), and the whole-step metrics.
    Seam(
        "prep_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "verl_split.seams.prep_v1",
        "split",
        compat.V1_TRAINER,
        part="prep",
        needs=(
            f"{_V1}_compute_old_log_prob(batch@0, metrics@1)",
            f"{_V1}_compute_ref_log_prob(batch@0, metrics@1)",
            f"{_V1}_compute_values(batch@0, metrics@1)",
            f"{_V1}_step_once",
            f"{_V1}ref_in_actor",
            f"{_V1}use_reference_policy",
            f"{_V1}global_steps",
        ),
    ),
    Seam(
        "prep_v0",
        "verl.trainer.ppo.ray_trainer",
        "verl_split.seams.prep_v0",
        "split",
        ALL_FAMILIES,
        part="prep",
        needs=(
            f"{_V0}_compute_old_log_prob(batch@0)",
            f"{_V0}_compute_ref_log_prob(batch@0)",
            f"{_V0}_compute_values(batch@0)",
            # A reward model colocated in the step: verl 0.7.1+ (0.7.0 scores it inside fit).
            f"?{_V0}_compute_reward_colocate(batch@0)",
            f"{_V0}fit",
            f"{_V0}use_reference_policy",
            f"{_V0}global_steps",
            "verl.protocol:DataProto.select(batch_keys, non_tensor_batch_keys, meta_info_keys)",
        ),
    ),
    Seam(
        "step_metrics",
        "verl.utils.tracking",
        "verl_split.seams.step_metrics",
        "split",
        ALL_FAMILIES,
        needs=("Tracking.log(data@0, step@1)",),
    ),
    # The critic's update runs on into the next step (verl_split/deferred_critic.py): where it is joined.
    Seam(
        "deferred_critic_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "verl_split.seams.deferred_critic_v1",
        "split",
        compat.V1_TRAINER,
        part="defer_critic",
        needs=(
            f"{_V1}fit",
            f"{_V1}_save_checkpoint",
            f"{_V1}_compute_reward_colocate(batch@0)",
            f"{_V1}_compute_values(batch@0, metrics@1)",
            f"{_V1}total_training_steps",
            f"?{_V1}trainer_mode",
            f"?{_V1}parameter_sync_step",
            "verl.trainer.ppo.v1.utils:MetricsAggregator.add_step_metrics(metrics@0, sample_count)",
            "verl.trainer.ppo.v1.utils:MetricsAggregator.get_aggregated_metrics",
        ),
    ),
    Seam(
        "deferred_critic_v0",
        "verl.trainer.ppo.ray_trainer",
        "verl_split.seams.deferred_critic_v0",
        "split",
        ALL_FAMILIES,
        part="defer_critic",
        needs=(
            f"{_V0}fit",
            f"{_V0}_save_checkpoint",
            f"{_V0}_compute_values(batch@0)",
            f"{_V0}total_training_steps",
            "verl.utils.metric:reduce_metrics",
            "verl.protocol:DataProto.from_single_dict(data, meta_info)",
        ),
    ),
    # v1 clears a step's TransferQueue keys at its end; the deferred update still reads them.
    Seam(
        "deferred_critic_tq",
        "transfer_queue",
        "verl_split.seams.deferred_critic_tq",
        "split",
        compat.V1_TRAINER,
        part="defer_critic",
        needs=("kv_clear(keys@0, partition_id@1)",),
    ),
    # Rollout replicas on the critic pool too (verl_split/shared_rollout.py), when switched on.
    Seam(
        "shared_rollout_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "verl_split.seams.shared_rollout_v1",
        "split",
        compat.SHARED_ROLLOUT,
        part="shared_rollout",
        needs=_SHARED_ROLLOUT_NEEDS,
    ),
    Seam(
        "legacy_critic_worker",
        "verl.workers.fsdp_workers",
        "verl_split.seams.legacy_critic_worker",
        "split",
        compat.LEGACY_WORKERS,
        part="updates",
        needs=("CriticWorker.update_critic", "verl.single_controller.base.decorator:MAGIC_ATTR"),
    ),
    Seam(
        "legacy_dispatch",
        "verl.single_controller.ray.base",
        "verl_split.seams.legacy_dispatch",
        "split",
        compat.LEGACY_WORKERS,
        part="updates",
        needs=("func_generator(blocking@5)",),
    ),
    # CPU dry run (VERL_SPLIT_CPU): verl_split/seams/cpu_*.py, one per verl file they answer.
    # 0.9 has a platform registry; 0.7/0.8 get the CPU device module and engine entries directly.
    Seam(
        "cpu_runtime_env",
        "verl.trainer.constants_ppo",
        "verl_split.seams.runtime_env",
        "cpu",
        ALL_FAMILIES,
        needs=("get_ppo_ray_runtime_env",),
    ),
    Seam(
        "cpu_platform",
        "verl.plugin.platform.platform_manager",
        "verl_split.seams.cpu_platform",
        "cpu",
        compat.PLATFORM_REGISTRY,
        needs=(
            "PlatformRegistry.register",
            "PlatformRegistry.get",
            "PlatformRegistry._platforms",
            "verl.plugin.platform.platform_base:PlatformBase",
            "verl.plugin.platform:get_platform",
        ),
    ),
    Seam(
        "cpu_device",
        "verl.utils.device",
        "verl_split.seams.cpu_device",
        "cpu",
        compat.BEFORE_V1,
        needs=("get_torch_device", "get_device_name"),
    ),
    Seam(
        "cpu_engine_registry",
        "verl.workers.engine.fsdp.transformer_impl",
        "verl_split.seams.cpu_engine_registry",
        "cpu",
        compat.BEFORE_V1,
        needs=("EngineRegistry._engines",),
    ),
    Seam(
        "cpu_attention",
        "verl.utils.attention_utils",
        "verl_split.seams.cpu_attention",
        "cpu",
        compat.BEFORE_V1,
        needs=("_get_attention_functions",),
    ),
    # verl 0.7.0's file logger cannot write the metrics its own trainer logs; the dry run reads that file.
    Seam(
        "cpu_file_logger",
        "verl.utils.tracking",
        "verl_split.seams.cpu_file_logger",
        "cpu",
        compat.PLAIN_JSON_FILE_LOGGER,
        needs=("FileLogger.log(data@0, step@1)",),
    ),
    Seam(
        "cpu_legacy_workers",
        "verl.workers.fsdp_workers",
        "verl_split.seams.cpu_legacy_workers",
        "cpu",
        compat.LEGACY_WORKERS,
        needs=(
            "ActorRolloutRefWorker.__init__(config@0)",
            "CriticWorker.__init__(config@0)",
            "verl.utils.distributed:initialize_global_process_group_ray(timeout_second)",
        ),
    ),
    Seam(
        "cpu_distributed",
        "verl.utils.distributed",
        "verl_split.seams.cpu_distributed",
        "cpu",
        ALL_FAMILIES,
        # backend: 0.7.1+ (0.7.0 has none: the seam starts gloo itself then, seams/cpu_distributed.py).
        needs=("initialize_global_process_group_ray(timeout_second@0)",),
    ),
    Seam(
        "cpu_fsdp",
        "verl.workers.engine.fsdp.transformer_impl",
        "verl_split.seams.cpu_fsdp",
        "cpu",
        ALL_FAMILIES,
        needs=("CPUOffloadPolicy",),
    ),
    Seam(
        "cpu_fsdp_legacy",
        "verl.workers.fsdp_workers",
        "verl_split.seams.cpu_fsdp",
        "cpu",
        compat.LEGACY_WORKERS,
        needs=("CPUOffloadPolicy",),
    ),
    Seam(
        "cpu_valuehead",
        "verl.utils.model",
        "verl_split.seams.cpu_valuehead",
        "cpu",
        ALL_FAMILIES,
        needs=("load_valuehead_model(local_path@0, torch_dtype@1, model_config@2, trust_remote_code@3)",),
    ),
    Seam(
        "cpu_rollout_worker",
        "verl.workers.rollout.base",
        "verl_split.seams.cpu_rollout_worker",
        "cpu",
        ALL_FAMILIES,
        needs=("_ROLLOUT_REGISTRY", *_CPU_ROLLOUT_NEEDS),
    ),
    Seam(
        "cpu_rollout_replica",
        "verl.workers.rollout.replica",
        "verl_split.seams.cpu_rollout_replica",
        "cpu",
        ALL_FAMILIES,
        needs=("RolloutReplicaRegistry.register", "RolloutReplicaRegistry._registry", *_CPU_ROLLOUT_NEEDS),
    ),
    # v1 polls for finished rollouts every 2 s: the CPU dry run's generation is timed as it ran.
    Seam(
        "cpu_replay_poll",
        "verl.trainer.ppo.v1.replay_buffer",
        "verl_split.seams.cpu_replay_poll",
        "cpu",
        compat.V1_TRAINER,
        needs=("ReplayBuffer.__init__(poll_interval)", "ReplayBuffer.poll_interval"),
    ),
)


@dataclass
class _State:
    active_features: frozenset[str] = frozenset()
    family: str | None = None
    #: Seams the preflight found unmet while their feature is off: not registered, so a switched-off
    #: feature really gets the run past a verl that lacks what it needs.
    skipped: frozenset[str] = frozenset()
    preflight: preflight.Report | None = None


_state = _State()
_registered: set[str] = set()  # seam names with a wrapt hook; wrapt cannot unregister hooks
_applied: dict[str, Seam] = {}


def seams_for(features: frozenset[str], family: str | None = None) -> list[Seam]:
    """The seams of ``features`` for the installed verl, or for release family ``family``."""
    return [s for s in SEAMS if s.feature in features and s.applies_to(family)]


def features_on(switches: frozenset[str], frozen: settings.Settings) -> set[str]:
    """The preflight features (``preflight.FEATURES`` keys) these switches and settings turn on."""
    effective = dataclasses.replace(frozen, enabled="split" in switches, cpu="cpu" in switches)
    return {key for key, feature in preflight.FEATURES.items() if feature.on(effective)}


def run_preflight(seams: list[Seam] | None = None) -> preflight.Report:
    """The preflight of ``seams`` (default: every seam that applies to the installed verl); reads verl's source."""
    if seams is None:
        seams = [s for s in SEAMS if s.applies_to()]
    return preflight.run(seams)


def require(part: str) -> None:
    """Raise VerlSplitError with the preflight's line if feature ``part``'s seams are unmet on this verl.

    For a feature switched on after activation, where the run's config is read: shared rollout's
    ``split_placement.shared_rollout`` (``seams/placement_check.py``, in the launching process).
    """
    report = run_preflight([s for s in SEAMS if s.part == part and s.applies_to()])
    if report.problems:
        raise VerlSplitError(report.problems[0].line(report.version))


def _in_ray_worker() -> bool:
    """This process is a Ray worker (the TaskRunner, a worker group's actor): verl-split's launching
    process ran the preflight before Ray started it."""
    ray = sys.modules.get("ray")
    try:
        return ray is not None and bool(ray.is_initialized())
    except Exception:
        return False


def activate(split: bool = True, cpu: bool = False, frozen: settings.Settings | None = None) -> list[str]:
    """Register the seams for the installed verl; return their names. Idempotent.

    ``frozen``: the settings the run uses from now on (default: read from the environment
    now); the adapters read them with ``settings.current()``, never the environment again.
    In a process that is not a Ray worker (the launching process, doctor, a test) the preflight
    checks every seam's needs against verl's source first; an unmet need of a switched-on feature
    stops the process with one line (``ActivationFailed`` through the caller), before Ray starts.
    """
    features = frozenset(f for f, on in (("split", split), ("cpu", cpu)) if on)
    family = compat.check_supported()
    log.configure()
    frozen = frozen if frozen is not None else settings.read()
    settings.freeze(frozen)
    _state.family = family
    _state.active_features = _state.active_features | features
    selected = seams_for(_state.active_features)
    on = features_on(_state.active_features, frozen)
    if not _in_ray_worker():
        # Once per process and set of seams: an explicit activate() after verl's entry point reads nothing twice.
        report = _state.preflight
        if report is None or report.checked_seams() != {s.name for s in selected}:
            report = _state.preflight = run_preflight(selected)
        blocking = [p for p in report.problems if p.feature in on]
        if blocking:
            raise VerlSplitError(blocking[0].line(report.version))
        _state.skipped = frozenset(report.failed_seams())
        for problem in report.problems:
            logger.info("verl-split: %s is off and not applied: %s", problem.seam, problem.line(report.version))
        note = compat.untested_note()
        if note:
            logger.warning("verl-split: %s", note)
    for seam in selected:
        if seam.name in _state.skipped:
            continue
        if seam.name in _registered:
            # A hook stays registered after deactivate(); re-apply now if its target is loaded.
            if seam.target in sys.modules:
                _apply(seam, sys.modules[seam.target])
            continue
        _registered.add(seam.name)
        wrapt.register_post_import_hook(functools.partial(_apply, seam), seam.target)
    logger.debug("verl-split active for verl %s: %s", family, ", ".join(sorted(_state.active_features)))
    return [s.name for s in selected if s.name not in _state.skipped]


def deactivate() -> None:
    """Undo every applied patch; hooks that fire later do nothing until activate() again."""
    _state.active_features = frozenset()
    for name in reversed(list(_applied)):
        seam = _applied.pop(name)
        target = sys.modules.get(seam.target)
        if target is not None:
            importlib.import_module(seam.module).unpatch(target)


def is_active() -> bool:
    return bool(_state.active_features)


def active_features() -> list[str]:
    return sorted(_state.active_features)


def applied_patches() -> list[str]:
    """Names of the seams patched in this process so far."""
    return list(_applied)


def pending_patches() -> list[str]:
    """Seams registered for this run whose target module is not imported yet."""
    if _state.family is None:
        return []
    left_out = set(_applied) | _state.skipped
    return [s.name for s in seams_for(_state.active_features) if s.name not in left_out]


def skipped_patches() -> list[str]:
    """Seams left out: their feature is off and this verl lacks what they need (the preflight said so)."""
    return sorted(_state.skipped)


def last_preflight() -> preflight.Report | None:
    """The preflight activation ran in this process (None in a Ray worker, or before activation)."""
    return _state.preflight


def _feature_off_and_unmet(seam: Seam) -> bool:
    """In a Ray worker: a seam of a switched-off feature whose needs this verl does not meet (its
    launching process skipped it too); checked when its target is imported, for this seam only."""
    if seam.part in features_on(_state.active_features, settings.current()):
        return False
    return bool(run_preflight([seam]).problems)


def _apply(seam: Seam, target: ModuleType) -> None:
    if seam.feature not in _state.active_features or seam.name in _applied or seam.name in _state.skipped:
        return
    if _in_ray_worker() and _feature_off_and_unmet(seam):
        _state.skipped = _state.skipped | {seam.name}
        return
    try:
        importlib.import_module(seam.module).patch(target)
    except VerlSplitError as exc:
        raise activation_failed(str(exc)) from exc
    except Exception as exc:
        # Never let a hook fail quietly: wrapt would drop it and the run would go on stock.
        raise activation_failed(
            f"could not patch {seam.target} (seam {seam.name!r}) for verl {compat.installed_version()}: "
            f"{type(exc).__name__}: {exc}. Unset VERL_SPLIT to run stock verl, and please report this.",
            unexpected=True,
        ) from exc
    _applied[seam.name] = seam
    logger.debug("verl-split patched %s (%s)", seam.target, seam.name)
