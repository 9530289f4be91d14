"""Run ``python -m verl.trainer.main_ppo`` in a subprocess: its output to a log file, its steps as they come.

verl, Ray and the workers print thousands of lines per run. The demo and the tests keep them in a log
file in the run's folder and follow the run through the metrics file that verl's ``file`` logger
appends one JSON line to after every step (``VERL_FILE_LOGGER_PATH``, unbuffered).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_split.dryrun import shm

METRICS_FILE = "metrics.jsonl"
LOG_FILE = "main_ppo.log"


def main_ppo_command(overrides: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]


def _step_record(line: bytes | str) -> dict[str, Any]:
    record = json.loads(line)
    return {"step": record["step"], **record["data"]}


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The per-step metrics verl's ``file`` logger wrote: one dict per step, ``step`` included."""
    with open(path) as f:
        return [_step_record(line) for line in f if line.strip()]


class MetricsTail:
    """The steps appended to a metrics file since the last :meth:`read_new`, while verl writes it.

    Only lines that end in a newline are read: verl may be halfway through writing the last one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:  # written anew (verl opens it with "wb")
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:  # verl creates it when the trainer starts, a minute in
            return []
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        steps = []
        for line in lines:
            if not line.strip():
                continue
            try:
                steps.append(_step_record(line))
            except (ValueError, KeyError, TypeError):
                # Progress is a courtesy: a line it cannot read must not stop the run.
                continue
        return steps


@dataclass
class Finished:
    """How one main_ppo subprocess ended."""

    returncode: int
    wall_s: float
    log_path: Path
    timed_out: bool = False
    shm_removed: list[str] = field(default_factory=list)  # segments the run left in /dev/shm, removed (shm.py)


def run_logged(
    command: Sequence[str],
    env: dict[str, str],
    cwd: Path,
    log_path: Path,
    metrics_path: Path,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    timeout: float | None = None,
    poll_s: float = 0.5,
) -> Finished:
    """Run ``command`` with stdout and stderr to ``log_path``; call ``on_step`` for each step verl logs.

    ``on_start`` gets the process id as soon as it runs (the tests sample its tree's memory).
    The process leads its own process group, with Ray and every worker under it: on a timeout,
    Ctrl-C or any error here the whole group is killed, so no worker keeps the cores busy. Once it has ended,
    the shared-memory segments it left in ``/dev/shm`` are removed (``shm.py``), however it ended.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    if metrics_path.exists():
        metrics_path.unlink()  # a previous run's steps are not this run's progress
    tail = MetricsTail(metrics_path)
    started = time.monotonic()
    timed_out = False
    shm_before = shm.snapshot()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            list(command), env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            if on_start is not None:
                on_start(proc.pid)
            while True:
                try:
                    returncode = proc.wait(timeout=poll_s)
                    break
                except subprocess.TimeoutExpired:
                    pass
                for step in tail.read_new():
                    if on_step is not None:
                        on_step(step)
                if timeout is not None and time.monotonic() - started > timeout:
                    timed_out = True
                    _kill_group(proc)
                    returncode = proc.wait()
                    break
        except BaseException:
            _kill_group(proc)
            proc.wait()
            shm.remove_left(shm_before)
            raise
    # What the run started and left running (a vLLM engine whose server died, a Ray worker): its segments in use.
    _kill_group(proc)
    shm_removed = _remove_segments_left(shm_before, log_path)
    for step in tail.read_new():  # the last step lands just before the process exits
        if on_step is not None:
            on_step(step)
    return Finished(returncode, time.monotonic() - started, log_path, timed_out, shm_removed)


def _remove_segments_left(before: frozenset[str], log_path: Path) -> list[str]:
    """Remove what the run left in /dev/shm, and say so at the end of its log."""
    removed = shm.remove_left(before)
    if removed:
        with open(log_path, "a") as log:
            log.write(
                f"verl-split runner: removed {len(removed)} shared-memory segment(s) the run left in "
                f"{shm.SHM_DIR}: {', '.join(removed)}\n"
            )
    return removed


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
        os.killpg(proc.pid, signal.SIGKILL)


def log_tail(path: str | os.PathLike[str], lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return ""
