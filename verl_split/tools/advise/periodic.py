"""Work a run does every few steps, not every step: validation and checkpoints, kept apart from the step.

verl validates every ``trainer.test_freq`` steps (``timing_s/testing``, the ``val-*`` / ``val/*`` metrics of the
same step) and saves every ``trainer.save_freq`` (``timing_s/save_checkpoint``). Counted as part of the step, a
30 s validation every 10th step adds 3 s to the mean step's fixed part and tens of percent to its spread, which
then reads as noise between layouts that is not there. So each step's total is taken without them, and they are
reported on their own.

Whether the release timed them inside ``timing_s/step`` differs: verl before 0.5 (``ray_trainer.fit``) validates
inside the step's timer, verl 0.9's trainers (``trainer/ppo/ray_trainer.py``, ``trainer/ppo/v1/trainer_base.py``)
after it; both save the checkpoint inside it. No version is assumed: a step's total holds the periodic work when
what its phases leave of the total (``timing_s/step`` less the timed phases) covers it, and only then is it taken
out.

A step that logs validation metrics but no ``timing_s/testing`` (a release that did not time it) cannot be
cleaned: it is left out of the means, and said.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TOTAL = "timing_s/step"
#: verl's names for the periodic work, and what each is.
PERIODIC = {"testing": "validation", "save_checkpoint": "checkpoint save"}
#: verl's top-level phases of a training step other than the periodic ones (their sub-timers are inside these).
STEP_PHASES = (
    "gen",
    "gen_max",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "update_weights",
)
#: Validation's metric prefixes: verl 0.3-0.4 ``val/test_score/<source>``, 0.5+ ``val-core/...``, ``val-aux/...``.
VALIDATION_PREFIXES = ("val/", "val-core/", "val-aux/")
#: A total covers a periodic time when what its phases leave is at least this share of it (three-decimal
#: console values lose up to 0.5 ms per item).
_COVER_SHARE = 0.98
_COVER_ABS_S = 0.01


@dataclass(frozen=True)
class PeriodicWork:
    """One kind of periodic work in a run: its seconds per step it ran in, and whether the total held it."""

    timer: str  # "testing", "save_checkpoint"
    seconds: dict[int, float]  # step -> seconds
    inside_total: dict[int, bool]  # step -> the step's total held it (taken out)

    @property
    def what(self) -> str:
        return PERIODIC[self.timer]

    @property
    def steps(self) -> tuple[int, ...]:
        return tuple(sorted(self.seconds))

    def every(self) -> int | None:
        """The period in steps, when the steps it ran in are evenly spaced; else None."""
        steps = self.steps
        gaps = {b - a for a, b in zip(steps, steps[1:], strict=False)}
        return gaps.pop() if len(gaps) == 1 else None


def set_apart(steps: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[PeriodicWork], list[str]]:
    """The steps with periodic work taken out of their totals; the work, per kind; notes.

    Each step's ``timing_s/step`` is replaced by the total without the periodic work it held, so that every
    reader after this (phases, the fixed part, the spread) sees the training step alone. A step with validation
    metrics but no validation timer is dropped.
    """
    works = []
    cleaned = [dict(step) for step in steps]
    for timer in PERIODIC:
        key = f"timing_s/{timer}"
        seconds, inside = {}, {}
        for step in cleaned:
            value = _number(step.get(key))
            total = _number(step.get(TOTAL))
            if value is None or total is None or value <= 0:
                continue
            n = int(step["step"])
            seconds[n] = value
            inside[n] = _held(step, total, value)
            if inside[n]:
                step[TOTAL] = total - value
        if seconds:
            works.append(PeriodicWork(timer, seconds, inside))
    notes = []
    untimed = [
        int(step["step"]) for step in cleaned if _validated(step) and _number(step.get("timing_s/testing")) is None
    ]
    if untimed:
        cleaned = [step for step in cleaned if int(step["step"]) not in untimed]
        notes.append(
            f"step {', '.join(map(str, untimed))} validated (val-* metrics) without a timing_s/testing to take "
            "out of its total: left out of the means"
        )
    for work in works:
        taken = [n for n in work.steps if work.inside_total[n]]
        where = (
            "taken out of the step's total, which held it"
            if len(taken) == len(work.steps)
            else "outside the step's total (this release times it after the step)"
            if not taken
            else f"taken out of the total of step {', '.join(map(str, taken))}, which held it"
        )
        # Validation generates on the actor pool's rollout: under a split's smaller actor pool it takes longer.
        caveat = (
            "; it generates on the actor pool, so a split's smaller actor pool would take longer over it (not in "
            "the predictions)"
            if work.timer == "testing"
            else ""
        )
        notes.append(
            f"{work.what} (timing_s/{work.timer}) on step {_list(work.steps)}: {where}; kept apart from the "
            f"phases, the fixed part and the spread{caveat}"
        )
    return cleaned, works, notes


def _held(step: Mapping[str, Any], total: float, value: float) -> bool:
    phases = sum(_number(step.get(f"timing_s/{name}")) or 0.0 for name in STEP_PHASES)
    return total - phases >= _COVER_SHARE * value - _COVER_ABS_S


def _validated(step: Mapping[str, Any]) -> bool:
    return any(isinstance(key, str) and key.startswith(VALIDATION_PREFIXES) for key in step)


def _list(steps: Sequence[int]) -> str:
    return ", ".join(map(str, steps[:8])) + (f" and {len(steps) - 8} more" if len(steps) > 8 else "")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)
