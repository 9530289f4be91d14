"""The preflight: does the installed verl have what each seam patches and reads, before Ray starts anything?

Each seam in ``seam_catalogue.SEAMS`` declares ``needs``: the verl names it wraps or reads, one string each::

    [module:]Name[.attr ...][(param, param@index, ...)]

* ``module`` defaults to the seam's target module; ``a|b`` names the modules verl has kept it in, over
  its releases (the first that has it is read); ``Name`` is a module-level name (function, class,
  variable, or a name the module imports), ``.attr`` an attribute of a class (its methods, class
  variables, dataclass fields, and instance attributes its methods assign as ``self.attr = ...``,
  inherited ones included).
* ``(params)``: parameters the function (a class: its ``__init__``) must have, by name; ``name@i`` also
  pins its position among the arguments a caller passes (``self`` not counted), for a wrapper that reads
  it positionally (``get_argument(args, kwargs, i, name)``).
* A leading ``?`` makes the need optional: checked only where verl has the name (a method a newer release
  added).
* A seam's target module and every module a need names must resolve. Targets outside verl (a package verl
  uses, ``transfer_queue``) are read from ``sys.path``.

The checks read verl's *source* with ``ast``; nothing of verl is imported. Activation runs in every process
of a run and the launching process must stay fast (``verl_split/_bootstrap.py``), and importing verl's
trainer modules there would cost seconds and apply seams where they do nothing. Parsing the dozen files the
declarations name takes a fraction of a second. ``verl-split doctor`` runs the same checks.

Features are what a user switches (``FEATURES``): each seam belongs to one (``Seam.feature``); a failed need
stops the run only when its feature is on, with one line naming the feature, the verl symbol, what differs
and how to switch that feature off. A seam whose feature is off and whose needs fail is not applied
(``activation``), so switching the feature off really gets the run past it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from verl_split.core import compat
from verl_split.plugin.needs import Need, check_need, parse
from verl_split.plugin.verl_source import Source, verl_roots

logger = logging.getLogger("verl_split")

# ------------------------------------------------------------------------------------------ the features


@dataclass(frozen=True)
class Feature:
    """One thing a user switches on or off, and how."""

    key: str
    label: str
    #: Is it on, given the run's settings (``verl_split.core.settings.Settings``)?
    on: Callable[[Any], bool]
    #: How to switch it off, for the end of the preflight's line.
    off: str


FEATURES: dict[str, Feature] = {
    f.key: f
    for f in (
        Feature(
            "placement",
            "split placement",
            lambda s: s.enabled,
            "unset VERL_SPLIT to run stock verl",
        ),
        Feature(
            "updates",
            "overlapped updates",
            lambda s: s.enabled and "updates" in s.overlap_phases,
            "set VERL_SPLIT_OVERLAP=prep (or off) to run the updates one after the other",
        ),
        Feature(
            "prep",
            "overlapped preparation",
            lambda s: s.enabled and "prep" in s.overlap_phases,
            "set VERL_SPLIT_OVERLAP=updates (or off) to run values after old_log_prob and ref",
        ),
        Feature(
            "defer_critic",
            "deferred critic update",
            lambda s: s.enabled and "defer_critic" in s.overlap_phases,
            "leave defer_critic out of VERL_SPLIT_OVERLAP (e.g. VERL_SPLIT_OVERLAP=updates,prep)",
        ),
        Feature(
            "stream_values",
            "streamed values",
            lambda s: s.enabled and s.stream_values,
            "set VERL_SPLIT_STREAM_VALUES=off to value the batch after generation",
        ),
        Feature(
            "shared_rollout",
            "shared rollout",
            lambda s: s.enabled and s.shared_rollout,
            "unset VERL_SPLIT_SHARED_ROLLOUT (and leave split_placement.shared_rollout out, or false)",
        ),
        Feature(
            "cpu",
            "CPU dry run",
            lambda s: s.cpu,
            "unset VERL_SPLIT_CPU and run on GPUs",
        ),
    )
}


# ------------------------------------------------------------------------------------------ the check


@dataclass(frozen=True)
class Problem:
    """A need the installed verl does not meet."""

    feature: str  # FEATURES key
    seam: str
    need: Need
    differs: str  # what differs, in words

    def line(self, version: str | None = None) -> str:
        """The one line a run stops with, and doctor shows."""
        feature = FEATURES[self.feature]
        on = f"verl {version}" if version else "this verl"
        return (
            f"{feature.label} needs verl's {self.need.symbol} (seam {self.seam}), but on {on} {self.differs}. "
            f"verl-split has not been adapted to this verl yet: {feature.off}, or install a tested verl "
            f"({compat.tested_text()})."
        )


@dataclass
class Report:
    """What the preflight found for each feature."""

    version: str | None
    problems: list[Problem] = field(default_factory=list)
    checked: dict[str, list[str]] = field(default_factory=dict)  # feature -> seams checked
    errors: list[str] = field(default_factory=list)  # needs the preflight failed to read (taken as met)
    seconds: float = 0.0

    def failed(self, feature: str) -> list[Problem]:
        return [p for p in self.problems if p.feature == feature]

    def failed_seams(self) -> set[str]:
        return {p.seam for p in self.problems}

    def checked_seams(self) -> set[str]:
        return {name for names in self.checked.values() for name in names}

    def features(self) -> dict[str, dict[str, Any]]:
        """Each feature that applies to this verl: available, and the reason when not (doctor's list)."""
        out = {}
        for key, feature in FEATURES.items():
            if key not in self.checked:
                continue
            problems = self.failed(key)
            out[key] = {
                "label": feature.label,
                "available": not problems,
                "reason": problems[0].line(self.version) if problems else "",
                "seams": self.checked[key],
            }
        return out


def run(seams: Iterable[Any], source: Source | None = None) -> Report:
    """Check every seam's target and needs (seams: ``activation.Seam``s that apply to this verl)."""
    started = time.perf_counter()
    source = source or Source(verl_roots())
    report = Report(compat.installed_version())
    for seam in seams:
        report.checked.setdefault(seam.feature, []).append(seam.name)
        needs = [Need(seam.target, (), None, seam.target)] + [parse(t, seam.target) for t in seam.needs]
        for need in needs:
            try:
                if not need.path:
                    differs = None if source.file_of(need.module) else f"module {need.module} does not exist"
                else:
                    differs = check_need(source, need)
            except Exception as exc:  # a bug of ours, or source we cannot read: never stop a run for it
                logger.debug("verl-split: preflight could not check %s: %s: %s", need.text, type(exc).__name__, exc)
                report.errors.append(f"{seam.name}: {need.text}: {type(exc).__name__}: {exc}")
                differs = None
            if differs is not None:
                report.problems.append(Problem(seam.feature, seam.name, need, differs))
                break  # the first need that fails says enough about this seam
    report.seconds = time.perf_counter() - started
    return report
