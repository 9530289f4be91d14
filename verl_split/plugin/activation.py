"""Switch verl-split's patches on and off in this process.

Each patch is a *seam* (``plugin/seam.py``): what verl-split changes in one verl module, declared as
data in the ``seams.py`` of its feature under ``verl_split/runtime/``. This registry sits below those
features and never imports them: ``verl_split/seam_catalogue.py`` collects the tables and hands them in
(:func:`install`) before anything here reads them. Seams are registered here by name, as wrapt post-import
hooks, so a seam's code loads only once its target is imported, and import order does not matter (patch
before or after ``import verl``).

A seam's row::

    Seam(name, target, switch, feature, verl, needs=(...), wraps=(Wrap(...), ...), apply="module:function")

* ``switch``: ``"split"`` (``VERL_SPLIT``) or ``"cpu"`` (``VERL_SPLIT_CPU``) registers it;
* ``feature``: the feature it belongs to, a key of ``preflight.FEATURES`` (``placement``, ``updates``, ``prep``,
  ``defer_critic``, ``shared_rollout``, ``cpu``);
* ``verl``: the releases it applies to, one of ``compat``'s named ranges;
* ``needs``: every verl name the seam (and the code it calls) wraps or reads, in ``preflight``'s little
  language: ``[module:]Name[.attr](param, param@index)``, module defaulting to ``target``; a leading
  ``?`` makes a need optional (checked only where verl has it). The preflight is derived from these rows
  alone: a seam added with its needs is checked before Ray starts, and in ``verl-split doctor``;
* ``wraps`` / ``apply``: what it does, as ``"module:function"`` strings (``plugin/seam.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import wrapt

from verl_split.core import compat, log, settings
from verl_split.core.errors import VerlSplitError, activation_failed
from verl_split.plugin import preflight
from verl_split.plugin.seam import Seam, patch_seam, unpatch_seam

logger = logging.getLogger("verl_split")


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
_catalogue: tuple[Seam, ...] | None = None  # every seam there is: install()


def install(seams: Iterable[Seam]) -> None:
    """Make ``seams`` the catalogue every other function here reads (``seam_catalogue.install`` hands in
    verl-split's); installing the same seams again changes nothing."""
    global _catalogue
    seams = tuple(seams)
    if seams == _catalogue:
        return
    names = [s.name for s in seams]
    if len(set(names)) != len(names):  # a name keys its hook and its applied patch
        raise ValueError(f"seam names must be unique: {sorted(n for n in set(names) if names.count(n) > 1)}")
    if _state.active_features:
        raise RuntimeError("verl-split: another seam catalogue while verl-split is active: deactivate() first")
    _catalogue = seams


def catalogue() -> tuple[Seam, ...]:
    """Every seam installed (:func:`install`); a clear error before any was."""
    if _catalogue is None:
        raise RuntimeError(
            "verl-split: no seams installed in plugin.activation: switch verl-split on through "
            "verl_split.seam_catalogue.activate(), or call verl_split.seam_catalogue.install() first"
        )
    return _catalogue


def seams_for(features: frozenset[str], family: str | None = None) -> list[Seam]:
    """The seams of ``features`` for the installed verl, or for release family ``family``."""
    return [s for s in catalogue() if s.switch in features and s.applies_to(family)]


def features_on(switches: frozenset[str], frozen: settings.Settings) -> set[str]:
    """The preflight features (``preflight.FEATURES`` keys) these switches and settings turn on."""
    effective = dataclasses.replace(frozen, enabled="split" in switches, cpu="cpu" in switches)
    return {key for key, feature in preflight.FEATURES.items() if feature.on(effective)}


def run_preflight(seams: list[Seam] | None = None) -> preflight.Report:
    """The preflight of ``seams`` (default: every seam that applies to the installed verl); reads verl's source."""
    if seams is None:
        seams = [s for s in catalogue() if s.applies_to()]
    return preflight.run(seams)


def require(feature: str) -> None:
    """Raise VerlSplitError with the preflight's line if ``feature``'s seams are unmet on this verl.

    For a feature switched on after activation, where the run's config is read: shared rollout's
    ``split_placement.shared_rollout`` (``runtime/placement/hooks.py``, in the launching process). The
    activation that applied the caller's seam installed the catalogue, so the runtime needs no import above it.
    """
    report = run_preflight([s for s in catalogue() if s.feature == feature and s.applies_to()])
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
    """Register the installed catalogue's seams for the installed verl; return their names. Idempotent.

    ``frozen``: the settings the run uses from now on (default: read from the environment
    now); the adapters read them with ``settings.current()``, never the environment again.
    In a process that is not a Ray worker (the launching process, doctor, a test) the preflight
    checks every seam's needs against verl's source first; an unmet need of a switched-on feature
    stops the process with one line (``ActivationFailed`` through the caller), before Ray starts.
    """
    catalogue()  # no catalogue installed: say so before any state changes
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
                apply(seam, sys.modules[seam.target])
            continue
        _registered.add(seam.name)
        wrapt.register_post_import_hook(functools.partial(apply, seam), seam.target)
    logger.debug("verl-split active for verl %s: %s", family, ", ".join(sorted(_state.active_features)))
    return [s.name for s in selected if s.name not in _state.skipped]


def deactivate() -> None:
    """Undo every applied patch; hooks that fire later do nothing until activate() again."""
    _state.active_features = frozenset()
    for name in reversed(list(_applied)):
        seam = _applied.pop(name)
        target = sys.modules.get(seam.target)
        if target is not None:
            unpatch_seam(seam, target)


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
    if seam.feature in features_on(_state.active_features, settings.current()):
        return False
    return bool(run_preflight([seam]).problems)


def apply(seam: Seam, target: ModuleType) -> None:
    if seam.switch not in _state.active_features or seam.name in _applied or seam.name in _state.skipped:
        return
    if _in_ray_worker() and _feature_off_and_unmet(seam):
        _state.skipped = _state.skipped | {seam.name}
        return
    try:
        patch_seam(seam, target)
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
