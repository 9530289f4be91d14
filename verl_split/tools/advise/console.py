"""verl's console output, as ``verl-split advise`` reads it: the step lines and the config printed at start-up.

What every verl release prints (``verl/utils/logger/aggregate_logger.py``, ``concat_dict_to_str``, called by
``LocalLogger.log`` for ``trainer.logger`` ``console``): one line per ``Tracking.log(data, step)``,
``step:N - key:value - key:value ...`` with the numeric values only. The value's spelling changed once:

* verl 0.1 to 0.4.1: ``f"{k}:{v:.3f}"`` (three decimals);
* verl 0.5 to 0.9: ``f"{k}:{pprint.pformat(v)}"``, Python's repr: ``2.0274987109999643``, and with numpy 2
  ``np.float64(2.0)``, ``np.int64(2)``; ``True``/``False`` for flags.

The trainer runs in a Ray actor (``TaskRunner``, ``TaskRunnerV1`` in 0.9) or task (``main_task``, 0.1-0.2), so
the driver's console shows each line behind Ray's ``(TaskRunner pid=123, ip=...)`` prefix, coloured with ANSI
codes, among every other process's output. A line may be cut (another process's output glued to it, a write
split in two, a run killed mid-print); it may hold bytes that are not UTF-8 (decoded as U+FFFD by the caller).

The config: every release's ``main_ppo`` pprints ``OmegaConf.to_container(config, resolve=True)`` at start-up,
a sorted dict over many lines (``{'actor_rollout_ref': ...`` first), whence ``trainer.nnodes``,
``trainer.n_gpus_per_node`` and a ``split_placement`` block.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

#: A step line's head. Not inside a key (``training/global_step:2 - `` is a metric, not a line's head), but
#: after anything else: Ray's prefix, a tqdm bar the line was glued to, a digit of the line it was glued to.
#: The pattern starts with its literal (no look-behind) so that re scans tens of MB for it at memchr speed;
#: the character before is checked in :func:`step_heads`.
STEP_RE = re.compile(r"step:(-?\d+) - ")
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_/.@-")
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Ray's prefix of a line from a remote actor or task, maybe coloured: ``(TaskRunner pid=123, ip=10.0.0.1) ``.
RAY_PREFIX_RE = re.compile(r"(?:\x1b\[[0-9;]*m)*(\([^()\n]*?pid=\d+[^()\n]*\))(?:\x1b\[[0-9;]*m)* ?")
#: Ray's deduplication suffix, ``[repeated 3x across cluster]``.
REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_NUMPY_RE = re.compile(r"np\.[a-z_]+\d*\((.*)\)\Z")
#: A line that carries on a cut step line: a fragment, then `` - key:value``.
_CONTINUATION_RE = re.compile(r"^\S*? - [A-Za-z_][\w/@.\-]*:\S")
#: The first line of the config's pprint, after the prefix (sorted keys: ``actor_rollout_ref`` first).
CONFIG_HEAD_RE = re.compile(r"\{'(?:actor_rollout_ref|algorithm|critic|data|trainer)': ")
_BARE_FLOAT_RE = re.compile(r"(?<=[\s:\[(,])-?(?:inf|nan)(?=[\s,\])}])")
#: How far a cut line's rest may be from it (other processes' lines in between).
_CONTINUATION_WINDOW = 12
#: Signs of a verl run's console, for the message when it has no step line.
VERL_SIGNS = ("TaskRunner", "main_task", "Training Progress", "'trainer': {", "verl")


@dataclass
class ConsoleLog:
    records: dict[int, dict[str, float]]
    config: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    step_lines: int = 0
    cut_steps: frozenset[int] = frozenset()  # steps whose line lost items


def parse_value(text: str) -> float | None:
    """One logged value: ``1.5``, ``-2e-08``, ``nan``, ``np.float64(1.5)``, ``np.int64(2)``, ``True``."""
    try:
        return float(text)
    except ValueError:
        pass
    match = _NUMPY_RE.match(text)
    if match:
        try:
            return float(match.group(1))
        except ValueError:
            return None
    return {"True": 1.0, "False": 0.0}.get(text)


def parse_items(segment: str) -> tuple[dict[str, float], list[str]]:
    """``key:value - key:value ...`` after ``step:N - ``: the values, and the items that are not ``key:value``."""
    if "\x1b" in segment:
        segment = ANSI_RE.sub("", segment)
    segment = REPEATED_RE.sub("", segment.rstrip())
    values: dict[str, float] = {}
    damaged = []
    for item in segment.split(" - "):
        key, sep, raw = item.rpartition(":")  # a value has no colon, nor does any key verl logs
        value = parse_value(raw) if sep and key and " " not in key and ":" not in key else None
        if value is None:
            damaged.append(item)
        else:
            values[key] = value
    return values, damaged


def split_prefix(line: str) -> tuple[str, str]:
    """(Ray's prefix or "", the line's own text without colour codes)."""
    match = RAY_PREFIX_RE.match(line)
    prefix, rest = (match.group(1), line[match.end() :]) if match else ("", line)
    return prefix, ANSI_RE.sub("", rest) if "\x1b" in rest else rest


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    cr = text.find("\r", start, end)  # a tqdm bar's carriage return: what follows is another line
    return end if cr < 0 else cr


def _continuation(text: str, end: int, prefix: str, segment: str) -> dict[str, float] | None:
    """The rest of a step line cut at ``end``: the same process's next line, past other processes' lines, when it
    carries on the step's items and makes the line whole; else None."""
    position = end
    for _ in range(_CONTINUATION_WINDOW):
        if position >= len(text):
            return None
        start = position + 1
        position = _line_end(text, start)
        line_prefix, content = split_prefix(text[start:position])
        if line_prefix != prefix:
            continue
        # A process writes in order: its next line is the rest, or the line was not cut.
        if step_heads(content) or not (_CONTINUATION_RE.match(content) or content.startswith((" - ", "- "))):
            return None
        values, damaged = parse_items(segment + content)
        return None if damaged else values
    return None


def step_heads(text: str) -> list[re.Match[str]]:
    """Every ``step:N - `` that starts a step line (not the end of a key such as ``training/global_step``)."""
    return [m for m in STEP_RE.finditer(text) if m.start() == 0 or text[m.start() - 1] not in _KEY_CHARS]


def parse_console(text: str) -> ConsoleLog:
    """Every step line's values, merged per step (a validation line and a training line may share a step)."""
    records: dict[int, dict[str, float]] = {}
    cut: dict[int, list[str]] = {}
    glued = 0
    matches = step_heads(text)
    for index, match in enumerate(matches):
        end = _line_end(text, match.end())
        after = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        segment = text[match.end() : min(end, after)]
        values, damaged = parse_items(segment)
        if not values:
            continue  # ``step:3 - `` in some other text
        if end <= after:  # the line ends here: its rest may follow on a later line of the same process
            line_start = text.rfind("\n", 0, match.start()) + 1
            prefix, _ = split_prefix(text[line_start : match.start()])
            joined = _continuation(text, end, prefix, segment)
            if joined is not None:
                values, damaged = joined, []
                glued += 1
        step = int(match.group(1))
        records.setdefault(step, {}).update(values)
        if damaged:
            cut.setdefault(step, []).extend(damaged)
    notes = []
    if glued:
        notes.append(f"{glued} step line(s) cut by other output were joined with their rest")
    for step, items in sorted(cut.items()):
        shown = ", ".join(repr(item[:40]) for item in items[:2])
        notes.append(f"step {step}: its line is cut or mixed with other output; left out: {shown}")
    config, config_note = find_config(text)
    if config_note:
        notes.append(config_note)
    return ConsoleLog(records, config, notes, step_lines=len(matches), cut_steps=frozenset(cut))


def find_config(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The config verl pprints at start-up, as a dict; or (None, why not) when it is there but unreadable.

    The first of its lines is found by its head; the others are the lines of the same process that follow and
    carry on the dict (pprint indents them); other processes' lines in between are skipped.
    """
    head = CONFIG_HEAD_RE.search(text)
    while head is not None:
        line_start = text.rfind("\n", 0, head.start()) + 1
        prefix, first = split_prefix(text[line_start : _line_end(text, line_start)])
        if first.startswith("{'"):
            break
        head = CONFIG_HEAD_RE.search(text, head.end())
    if head is None:
        return None, None
    lines = [first]
    position = _line_end(text, line_start)
    for _ in range(20000):  # a config is a few hundred lines; the bound keeps a broken one cheap
        if position >= len(text):
            break
        start = position + 1
        position = _line_end(text, start)
        line_prefix, content = split_prefix(text[start:position])
        if line_prefix != prefix or not content:  # another process's line, or the \n of a \r\n
            continue
        if not content.startswith(" "):
            break
        lines.append(content)
    block = "\n".join(lines)
    for attempt in (block, _BARE_FLOAT_RE.sub("None", block)):  # pprint writes inf and nan bare
        try:
            config = ast.literal_eval(attempt)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(config, dict):
            return config, None
    return None, (
        f"the config printed at start-up ({len(lines)} lines) is cut or mixed with other output and could not "
        "be read: the layout comes from the metrics or the flags"
    )


def looks_like_verl(text: str) -> bool:
    return any(sign in text for sign in VERL_SIGNS)
