"""Switch verl-split's patches on and off in this process.

Each patch is a *seam*: a module in ``verl_split.seams`` with ``patch(module)`` and
``unpatch(module)`` for one verl module (its target). Seams are registered here by
name, as wrapt post-import hooks, so a seam's code loads only once its target is
imported, and import order does not matter (patch before or after ``import verl``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from dataclasses import dataclass
from types import ModuleType

import wrapt
from packaging.specifiers import SpecifierSet

from verl_split import compat, log, settings
from verl_split.errors import VerlSplitError, activation_failed

logger = logging.getLogger("verl_split")


@dataclass(frozen=True)
class Seam:
    name: str
    target: str  # the verl module whose import triggers the patch
    module: str  # the verl_split module holding patch() / unpatch()
    feature: str  # "split" (VERL_SPLIT) or "cpu" (VERL_SPLIT_CPU)
    verl: SpecifierSet  # the verl releases this seam applies to: one of compat's named ranges

    def applies_to(self, family: str | None = None) -> bool:
        """True for the installed verl, or for release family ``family`` (``"0.8"``)."""
        return compat.verl_in(self.verl) if family is None else self.verl.contains(family, prereleases=True)


#: Seams whose verl target is the same in every supported release.
ALL_FAMILIES = compat.ANY

#: Every seam verl-split patches, per feature and verl release family.
SEAMS: tuple[Seam, ...] = (
    Seam("runtime_env", "verl.trainer.constants_ppo", "verl_split.seams.runtime_env", "split", ALL_FAMILIES),
    # Split placement: validate in the launching process, then apply in the trainer (v1) / TaskRunner (v0);
    # on 0.7/0.8 the TaskRunner is main_ppo's __main__, so in RayPPOTrainer's constructor.
    Seam("placement_check", "verl.utils.device", "verl_split.seams.placement_check", "split", ALL_FAMILIES),
    Seam(
        "placement_v1", "verl.trainer.ppo.v1.trainer_base", "verl_split.seams.placement_v1", "split", compat.V1_TRAINER
    ),
    Seam("placement_v0", "verl.trainer.main_ppo_v0", "verl_split.seams.placement_v0", "split", compat.V1_TRAINER),
    Seam(
        "placement_legacy",
        "verl.trainer.ppo.ray_trainer",
        "verl_split.seams.placement_legacy",
        "split",
        compat.BEFORE_V1,
    ),
    # Concurrent actor and critic updates (verl_split/overlap.py); 0.7's legacy critic: verl_split/legacy.py.
    Seam("overlap_v1", "verl.trainer.ppo.v1.trainer_base", "verl_split.seams.overlap_v1", "split", compat.V1_TRAINER),
    Seam("overlap_v0", "verl.trainer.ppo.ray_trainer", "verl_split.seams.overlap_v0", "split", compat.ENGINE_WORKERS),
    Seam(
        "overlap_legacy",
        "verl.trainer.ppo.ray_trainer",
        "verl_split.seams.overlap_legacy",
        "split",
        compat.LEGACY_WORKERS,
    ),
    # values beside old_log_prob + ref (verl_split/prep_overlap.py), and the whole-step metrics.
    Seam("prep_v1", "verl.trainer.ppo.v1.trainer_base", "verl_split.seams.prep_v1", "split", compat.V1_TRAINER),
    Seam("prep_v0", "verl.trainer.ppo.ray_trainer", "verl_split.seams.prep_v0", "split", ALL_FAMILIES),
    Seam("step_metrics", "verl.utils.tracking", "verl_split.seams.step_metrics", "split", ALL_FAMILIES),
    # Rollout replicas on the critic pool too (verl_split/shared_rollout.py), when switched on.
    Seam(
        "shared_rollout_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "verl_split.seams.shared_rollout_v1",
        "split",
        compat.SHARED_ROLLOUT,
    ),
    Seam(
        "legacy_critic_worker",
        "verl.workers.fsdp_workers",
        "verl_split.seams.legacy_critic_worker",
        "split",
        compat.LEGACY_WORKERS,
    ),
    Seam(
        "legacy_dispatch",
        "verl.single_controller.ray.base",
        "verl_split.seams.legacy_dispatch",
        "split",
        compat.LEGACY_WORKERS,
    ),
    # CPU dry run (VERL_SPLIT_CPU): verl_split/seams/cpu_*.py, one per verl file they answer.
    # 0.9 has a platform registry; 0.7/0.8 get the CPU device module and engine entries directly.
    Seam("cpu_runtime_env", "verl.trainer.constants_ppo", "verl_split.seams.runtime_env", "cpu", ALL_FAMILIES),
    Seam(
        "cpu_platform",
        "verl.plugin.platform.platform_manager",
        "verl_split.seams.cpu_platform",
        "cpu",
        compat.PLATFORM_REGISTRY,
    ),
    Seam("cpu_device", "verl.utils.device", "verl_split.seams.cpu_device", "cpu", compat.BEFORE_V1),
    Seam(
        "cpu_engine_registry",
        "verl.workers.engine.fsdp.transformer_impl",
        "verl_split.seams.cpu_engine_registry",
        "cpu",
        compat.BEFORE_V1,
    ),
    Seam("cpu_attention", "verl.utils.attention_utils", "verl_split.seams.cpu_attention", "cpu", compat.BEFORE_V1),
    Seam(
        "cpu_legacy_workers",
        "verl.workers.fsdp_workers",
        "verl_split.seams.cpu_legacy_workers",
        "cpu",
        compat.LEGACY_WORKERS,
    ),
    Seam("cpu_distributed", "verl.utils.distributed", "verl_split.seams.cpu_distributed", "cpu", ALL_FAMILIES),
    Seam("cpu_fsdp", "verl.workers.engine.fsdp.transformer_impl", "verl_split.seams.cpu_fsdp", "cpu", ALL_FAMILIES),
    Seam("cpu_fsdp_legacy", "verl.workers.fsdp_workers", "verl_split.seams.cpu_fsdp", "cpu", compat.LEGACY_WORKERS),
    Seam("cpu_valuehead", "verl.utils.model", "verl_split.seams.cpu_valuehead", "cpu", ALL_FAMILIES),
    Seam("cpu_rollout_worker", "verl.workers.rollout.base", "verl_split.seams.cpu_rollout_worker", "cpu", ALL_FAMILIES),
    Seam(
        "cpu_rollout_replica",
        "verl.workers.rollout.replica",
        "verl_split.seams.cpu_rollout_replica",
        "cpu",
        ALL_FAMILIES,
    ),
)


@dataclass
class _State:
    active_features: frozenset[str] = frozenset()
    family: str | None = None


_state = _State()
_registered: set[str] = set()  # seam names with a wrapt hook; wrapt cannot unregister hooks
_applied: dict[str, Seam] = {}


def seams_for(features: frozenset[str], family: str | None = None) -> list[Seam]:
    """The seams of ``features`` for the installed verl, or for release family ``family``."""
    return [s for s in SEAMS if s.feature in features and s.applies_to(family)]


def activate(split: bool = True, cpu: bool = False, frozen: settings.Settings | None = None) -> list[str]:
    """Register the seams for the installed verl; return their names. Idempotent.

    ``frozen``: the settings the run uses from now on (default: read from the environment
    now); the adapters read them with ``settings.current()``, never the environment again.
    """
    features = frozenset(f for f, on in (("split", split), ("cpu", cpu)) if on)
    family = compat.check_supported()
    log.configure()
    settings.freeze(frozen if frozen is not None else settings.read())
    _state.family = family
    _state.active_features = _state.active_features | features
    selected = seams_for(_state.active_features)
    for seam in selected:
        if seam.name in _registered:
            # A hook stays registered after deactivate(); re-apply now if its target is loaded.
            if seam.target in sys.modules:
                _apply(seam, sys.modules[seam.target])
            continue
        _registered.add(seam.name)
        wrapt.register_post_import_hook(functools.partial(_apply, seam), seam.target)
    logger.debug("verl-split active for verl %s: %s", family, ", ".join(sorted(_state.active_features)))
    return [s.name for s in selected]


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
    return [s.name for s in seams_for(_state.active_features) if s.name not in _applied]


def _apply(seam: Seam, target: ModuleType) -> None:
    if seam.feature not in _state.active_features or seam.name in _applied:
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
