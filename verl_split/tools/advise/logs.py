"""One run's log, whatever verl wrote it as: the format told by content, and its training steps made uniform.

Formats (:mod:`verl_split.tools.advise.console`, :mod:`verl_split.tools.advise.exports`): verl's console output of any
release (0.1 to 0.9), verl's JSONL file logger, a CSV export of a tracker run. No flag names the format: the
file's first line decides JSONL (a JSON object) or CSV (a header with a step column), else it is console output
when it holds ``step:N - key:value`` lines.

Then the steps are made uniform, and what is missing is said with what takes its place:

* verl 0.1 spells the timings ``timing/gen`` ...: read as ``timing_s/gen`` ...;
* a step's total (``timing_s/step``; verl 0.1 logs none): the sum of its timed phases;
* ``old_log_prob`` (verl 0.1 computes it inside generation): in the generation lane, said;
* the reward (scored inside generation, or inside the advantages before verl 0.4): held where verl timed it;
* a record without timings (validation, ``val-core/*`` at step 0) is not a training step; when some steps have
  a total and others not, those others were cut and are left out;
* validation and checkpoints, run every few steps, are taken out of the step's total and kept apart (below).

Work a run does every few steps, not every step (``set_apart``): verl validates every ``trainer.test_freq`` steps
(``timing_s/testing``, the ``val-*`` / ``val/*`` metrics of the same step) and saves every ``trainer.save_freq``
(``timing_s/save_checkpoint``). Counted as part of the step, a 30 s validation every 10th step adds 3 s to the
mean step's fixed part and tens of percent to its spread, which then reads as noise between layouts that is not
there. So each step's total is taken without them, and they are reported on their own.

Whether the release timed them inside ``timing_s/step`` differs: verl before 0.5 (``ray_trainer.fit``) validates
inside the step's timer, verl 0.9's trainers (``trainer/ppo/ray_trainer.py``, ``trainer/ppo/v1/trainer_base.py``)
after it; both save the checkpoint inside it. No version is assumed: a step's total holds the periodic work when
what its phases leave of the total (``timing_s/step`` less the timed phases) covers it, and only then is it taken
out. A step that logs validation metrics but no ``timing_s/testing`` (a release that did not time it) cannot be
cleaned: it is left out of the means, and said.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_split.core import metric_names as names
from verl_split.tools.advise.console import looks_like_verl, parse_console
from verl_split.tools.advise.exports import AdviseError, csv_header, parse_csv, parse_jsonl

CONSOLE = "verl console output"
JSONL = "JSONL (verl's file logger)"
CSV = "CSV export"

FORMATS_HINT = (
    "advise reads verl's console output (the 'step:N - key:value - ...' lines of trainer.logger console, as "
    "saved from the driver's terminal), verl's file logger JSONL (trainer.logger='[console,file]', "
    "VERL_FILE_LOGGER_PATH=run.jsonl), or a CSV export of the run (a _step or step column, one column per "
    "metric, e.g. timing_s/gen)"
)
_FIRST_TEXT = re.compile(r"[^\s\ufeff]")

#: A step's total, as verl times it.
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
#: The phases verl times at the top level of a step (``marked_timer``/``_timer`` names): their sum stands in for
#: a step total verl did not log. Sub-timers (``generate_sequences``, ``reshard``) are inside these.
TOP_PHASES = (*STEP_PHASES, *PERIODIC)


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


@dataclass
class Log:
    path: str
    format: str
    steps: list[dict[str, Any]]  # the training steps, ``step`` included, sorted
    config: dict[str, Any] | None = None  # the config printed at start-up (console only)
    notes: list[str] = field(default_factory=list)
    #: Validation and checkpoints, out of the steps' totals (``set_apart``).
    periodic: list[PeriodicWork] = field(default_factory=list)
    text: str = ""  # the console's text (for the overrides it echoes); "" for JSONL and CSV


def read_log(path: str | os.PathLike[str]) -> Log:
    """Read, detect and normalise one run's log; AdviseError with one line when it cannot be used."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise AdviseError(f"{name}: no such file. {FORMATS_HINT}.") from None
    except OSError as exc:
        raise AdviseError(f"{name}: cannot be read ({exc.strerror or exc}).") from None
    notes = []
    # A terminal's capture holds whatever every process wrote; the numbers are ASCII either way. One decode
    # (a strict one first would read tens of MB twice).
    text = raw.decode("utf-8", errors="replace")
    replaced = text.count("\ufffd")
    if replaced:
        notes.append(f"{replaced} byte sequence(s) that are not UTF-8 were read as U+FFFD")
    start = _FIRST_TEXT.search(text)
    if start is None:
        raise AdviseError(f"{name} is empty: no step was logged. {FORMATS_HINT}.")
    end = text.find("\n", start.start())
    first = text[start.start() : end if end >= 0 else len(text)]
    config, cut = None, frozenset()
    if first.startswith("{") and not first.startswith("{'"):
        kind = JSONL
        records, more = parse_jsonl(text, name, FORMATS_HINT)
    elif csv_header(first) is not None:
        kind = CSV
        records, more = parse_csv(text, name)
    else:
        kind = CONSOLE
        console = parse_console(text)
        if console.step_lines == 0 or not console.records:
            if looks_like_verl(text):
                raise AdviseError(
                    f"{name} is verl's console output but has no 'step:N - key:value' metrics line: was the console "
                    "logger on (trainer.logger='[console]' or '[console,...]'), and did the run reach a step?"
                )
            raise AdviseError(f"{name} is in none of the formats advise reads: {FORMATS_HINT}.")
        records, more, config, cut = console.records, console.notes, console.config, console.cut_steps
    notes += more
    if not records:
        if more:  # the only metrics line was cut
            raise AdviseError(f"{name}: no whole step to read ({'; '.join(more)}).")
        raise AdviseError(f"{name} is empty: it holds no step's metrics. {FORMATS_HINT}.")
    steps, more = training_steps(records, name, cut)
    steps, periodic, apart = set_apart(steps)
    if not steps:
        raise AdviseError(f"{name}: every training step validated without a timing_s/testing: no step to read.")
    return Log(name, kind, steps, config, notes + more + apart, periodic, text if kind == CONSOLE else "")


def training_steps(
    records: dict[int, dict[str, Any]], name: str, cut: frozenset[int] = frozenset()
) -> tuple[list[dict[str, Any]], list[str]]:
    """The records that are training steps, with ``timing_s/*`` names and a total; notes on what stood in.

    ``cut``: steps whose line lost items; without a total of their own they are left out, never summed up.
    """
    for data in records.values():
        for key in [k for k in data if k.startswith("timing/")]:
            data.setdefault("timing_s/" + key[len("timing/") :], data[key])
    timed = {
        n: d
        for n, d in sorted(records.items())
        if _number(d.get("timing_s/gen")) is not None or _number(d.get(TOTAL)) is not None
    }
    if not timed:
        raise AdviseError(
            f"{name} has metrics but no phase timings (no timing_s/* or timing/* in any of its {len(records)} "
            "steps): advise needs the timings verl's PPO trainers log every training step (validation-only "
            "records have none)."
        )
    notes = []
    has_total = any(_number(d.get(TOTAL)) is not None for d in timed.values())
    # Where the log has totals, a step without one was cut; in verl 0.1's log (none) only a step that lost items.
    partial = [n for n, d in timed.items() if _number(d.get(TOTAL)) is None and (has_total or n in cut)]
    if partial:
        notes.append(f"step {_listed(partial, 6)} left out: no {TOTAL}, the line or row was cut")
        timed = {n: d for n, d in timed.items() if n not in partial}
    if not timed:
        raise AdviseError(f"{name}: every step's line is cut (no {TOTAL} in any): no whole step to read.")
    if not has_total:
        for data in timed.values():
            data[TOTAL] = sum(_number(data.get(f"timing_s/{p}")) or 0.0 for p in TOP_PHASES)
        notes.append(
            f"no step total ({TOTAL}; verl 0.1 logs none): each step taken as the sum of its timed phases, "
            "so what verl did not time (data loading, logging) counts as 0 s"
        )
    steps = [{"step": n, **d} for n, d in timed.items()]
    if not any(key in d for d in steps for key in ("timing_s/old_log_prob", names.PREP_ACTOR_S)):
        notes.append(
            "old_log_prob is not timed apart (verl 0.1 computes it inside generation): it is in the generation "
            "lane, and old_log_prob + ref is ref alone"
        )
    if not any("timing_s/reward" in d for d in steps):
        notes.append(
            "the reward is not timed apart (scored during generation, or inside the advantages before verl 0.4): "
            "it stays in the phase verl timed it in"
        )
    return steps, notes


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
            f"{work.what} (timing_s/{work.timer}) on step {_listed(work.steps, 8)}: {where}; kept apart from the "
            f"phases, the fixed part and the spread{caveat}"
        )
    return cleaned, works, notes


def _held(step: Mapping[str, Any], total: float, value: float) -> bool:
    phases = sum(_number(step.get(f"timing_s/{name}")) or 0.0 for name in STEP_PHASES)
    return total - phases >= _COVER_SHARE * value - _COVER_ABS_S


def _validated(step: Mapping[str, Any]) -> bool:
    return any(isinstance(key, str) and key.startswith(VALIDATION_PREFIXES) for key in step)


def _listed(steps: Sequence[int], shown: int) -> str:
    return ", ".join(map(str, steps[:shown])) + (f" and {len(steps) - shown} more" if len(steps) > shown else "")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)
