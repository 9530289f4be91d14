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
* validation and checkpoints, run every few steps, are taken out of the step's total and kept apart
  (:mod:`verl_split.tools.advise.periodic`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from verl_split.core import metric_names as names
from verl_split.tools.advise.console import looks_like_verl, parse_console
from verl_split.tools.advise.exports import AdviseError, csv_header, parse_csv, parse_jsonl
from verl_split.tools.advise.periodic import PERIODIC, STEP_PHASES, TOTAL, PeriodicWork, set_apart

CONSOLE = "verl console output"
JSONL = "JSONL (verl's file logger)"
CSV = "CSV export"

FORMATS_HINT = (
    "advise reads verl's console output (the 'step:N - key:value - ...' lines of trainer.logger console, as "
    "saved from the driver's terminal), verl's file logger JSONL (trainer.logger='[console,file]', "
    "VERL_FILE_LOGGER_PATH=run.jsonl), or a CSV export of the run (a _step or step column, one column per "
    "metric, e.g. timing_s/gen)"
)
#: The phases verl times at the top level of a step (``marked_timer``/``_timer`` names): their sum stands in for
#: a step total verl did not log. Sub-timers (``generate_sequences``, ``reshard``) are inside these.
TOP_PHASES = (*STEP_PHASES, *PERIODIC)
_FIRST_TEXT = re.compile(r"[^\s\ufeff]")


@dataclass
class Log:
    path: str
    format: str
    steps: list[dict[str, Any]]  # the training steps, ``step`` included, sorted
    config: dict[str, Any] | None = None  # the config printed at start-up (console only)
    notes: list[str] = field(default_factory=list)
    #: Validation and checkpoints, out of the steps' totals (``periodic``).
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
        notes.append(f"step {_numbers(partial)} left out: no {TOTAL}, the line or row was cut")
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


def _numbers(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:6])) + (f" and {len(steps) - 6} more" if len(steps) > 6 else "")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)
