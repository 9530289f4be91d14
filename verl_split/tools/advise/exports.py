"""Metric files ``verl-split advise`` reads besides the console: verl's JSONL and CSV exports of a tracker run.

* JSONL: verl's ``file`` logger (``verl/utils/tracking.py`` ``FileLogger``; ``trainer.logger=[console,file]``,
  path ``VERL_FILE_LOGGER_PATH``): one ``{"step": N, "data": {...}}`` per ``Tracking.log``. Flat lines
  (``{"step": N, "timing_s/gen": ...}``) are read too. A line cut by a run that was killed mid-write is left out
  and said.
* CSV, wide (W&B's ``run.history()`` or a chart's "Export CSV", MLflow or TensorBoard data turned into a table):
  one row per step, a step column (``_step``, ``step``, ``Step``, ``global_step``), one column per metric named as
  verl logs it (``timing_s/gen``); empty cells where a metric is missing. W&B chart exports name columns
  ``<run> - <metric>`` with ``__MIN``/``__MAX`` companions: the run's name is dropped and the companions ignored.
* CSV, long (MLflow's metric history): ``key``, ``value`` and ``step`` columns, one row per metric and step.

Each reader returns ``{step: {metric: value}}``, rows of one step merged, and notes on what it left out.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from verl_split.core.errors import VerlSplitError

#: Step columns of a wide CSV, in the order they are preferred.
STEP_COLUMNS = ("_step", "step", "global_step", "trainer/global_step", "training/global_step")
_COMPANIONS = ("__MIN", "__MAX", "__min", "__max")


class AdviseError(VerlSplitError):
    """Input ``verl-split advise`` cannot use: the message says what is wrong and how to fix it."""


def parse_jsonl(text: str, name: str, hint: str) -> tuple[dict[int, dict[str, Any]], list[str]]:
    records: dict[int, dict[str, Any]] = {}
    cut = []
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        number = index + 1
        try:
            record = json.loads(line)
        except ValueError:
            # A run killed mid-write leaves half a line (the file logger appends, so a resumed run goes on
            # after it): leave it out. A line that never was JSON means this is not a JSONL file.
            if index == last or line.lstrip().startswith("{"):
                cut.append(number)
                continue
            raise AdviseError(f"{name} line {number} is not JSON, so this is not a metrics file. {hint}.") from None
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, bool) or not isinstance(step, int | float):
            raise AdviseError(f'{name} line {number} has no numeric "step", so this is not a metrics file. {hint}.')
        data = record.get("data", record)
        if not isinstance(data, dict):
            raise AdviseError(f'{name} line {number}: "data" is not an object. {hint}.')
        records.setdefault(int(step), {}).update({k: v for k, v in data.items() if k != "step"})
    notes = [f"line {', '.join(map(str, cut))} cut (not whole JSON): left out"] if cut else []
    return records, notes


def csv_header(first: str) -> list[str] | None:
    """The first line's cells when it is the header of a CSV export advise reads, else None."""
    first = first.rstrip("\r")
    if "," not in first:
        return None
    try:
        cells = [cell.strip() for cell in next(csv.reader([first]))]
    except (csv.Error, StopIteration):
        return None
    lowered = {cell.lower() for cell in cells}
    if {"key", "value", "step"} <= lowered or any(column in lowered for column in STEP_COLUMNS):
        return cells
    return None


def parse_csv(text: str, name: str) -> tuple[dict[int, dict[str, Any]], list[str]]:
    try:
        rows = list(csv.reader(io.StringIO(text.lstrip("\ufeff"))))
    except csv.Error as exc:
        raise AdviseError(f"{name} is not a CSV file advise can read ({exc}).") from None
    header = [cell.strip() for cell in rows[0]]
    lowered = [cell.lower() for cell in header]
    if {"key", "value", "step"} <= set(lowered) and not any(c in lowered for c in ("_step", "global_step")):
        return _long_csv(rows[1:], lowered, name)
    step_index = next(lowered.index(column) for column in STEP_COLUMNS if column in lowered)
    columns = _metric_columns(header, step_index, name)
    records: dict[int, dict[str, Any]] = {}
    skipped = 0
    for row in rows[1:]:
        if step_index >= len(row) or not row[step_index].strip():
            skipped += bool(any(cell.strip() for cell in row))
            continue
        step = _cell(row[step_index])
        if step is None:
            skipped += 1
            continue
        data = records.setdefault(int(step), {})
        for index, metric in columns:
            value = _cell(row[index]) if index < len(row) else None
            if value is not None:
                data[metric] = value
    notes = [f"{skipped} row(s) without a step number left out"] if skipped else []
    return records, notes


def _metric_columns(header: list[str], step_index: int, name: str) -> list[tuple[int, str]]:
    """(column, verl's metric name) of every metric column; W&B's ``<run> - <metric>`` loses the run's name."""
    columns = []
    runs = set()
    for index, cell in enumerate(header):
        if index == step_index or not cell or cell.endswith(_COMPANIONS):
            continue
        run, sep, metric = cell.rpartition(" - ")
        if sep and "/" in metric:
            runs.add(run)
            cell = metric
        columns.append((index, cell))
    if len(runs) > 1:
        raise AdviseError(
            f"{name} holds the metrics of {len(runs)} runs ({', '.join(sorted(runs)[:3])}): export one run per file "
            "and pass each file to advise."
        )
    return columns


def _long_csv(rows: list[list[str]], lowered: list[str], name: str) -> tuple[dict[int, dict[str, Any]], list[str]]:
    key_i, value_i, step_i = (lowered.index(c) for c in ("key", "value", "step"))
    records: dict[int, dict[str, Any]] = {}
    for row in rows:
        if max(key_i, value_i, step_i) >= len(row):
            continue
        step, value = _cell(row[step_i]), _cell(row[value_i])
        if step is not None and value is not None:
            records.setdefault(int(step), {})[row[key_i].strip()] = value
    return records, []


def _cell(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
