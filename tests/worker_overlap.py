"""Run one PPO step's critic and actor updates on stand-in workers and read back when each ran.

The step itself is a script (``tests/e2e/test_overlap_*_workers.py``) run in a fresh
interpreter, so verl-split activates from the environment as in a real run; its workers are
in ``tests/plugins`` (``stand_ins.py`` explains the log).
"""

from __future__ import annotations

import json
from pathlib import Path

from pyrun import run_json

PLUGINS = str(Path(__file__).resolve().parent / "plugins")
SLEEP_S = 2.0  # long against Ray's dispatch latency on a loaded 2-core machine

Span = tuple[float, float]


def run_step(script: str, tmp_path: Path, **env: str) -> tuple[dict, dict[str, list[Span]]]:
    """The script's JSON output, and each role's update intervals in the order they ended."""
    log = tmp_path / "updates.jsonl"
    out = run_json(
        script,
        env={"PYTHONPATH": PLUGINS, "STAND_IN_LOG": str(log), "STAND_IN_SLEEP": str(SLEEP_S), **env},
        timeout=300,
    )
    spans: dict[str, list[Span]] = {"actor": [], "critic": []}
    for line in log.read_text().splitlines():
        record = json.loads(line)
        spans[record["role"]].append((record["start"], record["end"]))
    return out, spans


def shared(a: Span, b: Span) -> float:
    """How much of the shorter interval the two have in common (0 to 1)."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) / min(a[1] - a[0], b[1] - b[0])
