"""``verl-split demo --compare`` as ``make demo`` runs it: three real main_ppo runs on CPU, a short console.

The same job as stock verl, split with overlaps off and split with overlaps on; what it prints (progress,
the per-phase table, the update table) and what it leaves in OUT (three metrics files, three logs, two plots).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from verl_split.runner import METRICS_FILE, read_metrics

pytestmark = pytest.mark.e2e

STEPS = 2
TIMEOUT_S = 1200  # three runs of about a minute each on 2 busy cores


def test_demo_compare_runs_three_ways_and_keeps_the_console_short(tiny_assets, tmp_path):
    out = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    env["VERL_SPLIT"] = "1"  # as `make demo` sets it
    command = [sys.executable, "-m", "verl_split.cli", "demo", "--compare", "--steps", str(STEPS)]
    command += ["--out", str(out), "--assets", str(tiny_assets.root)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-6000:]

    for folder in (out / "stock", out / "sequential", out):
        assert [m["step"] for m in read_metrics(folder / METRICS_FILE)] == list(range(1, STEPS + 1)), folder
        assert (folder / "main_ppo.log").stat().st_size > 10_000, "verl's output belongs in the run's log"
    assert not any(key.startswith("split/") for m in read_metrics(out / "stock" / METRICS_FILE) for key in m)
    assert {m["split/overlapped"] for m in read_metrics(out / "sequential" / METRICS_FILE)} == {0.0}
    assert {m["split/overlapped"] for m in read_metrics(out / METRICS_FILE)} == {1.0}
    for plot in ("step_times.png", "update_times.png"):
        assert (out / plot).stat().st_size > 10_000, plot

    lines = console.splitlines()
    header = ["phase", "stock", "split, overlaps off", "split, overlaps on"]
    assert any([cell.strip() for cell in line.split("|")] == header for line in lines), console
    assert any(line.startswith("speed-up of the whole step, split, overlaps on: ") for line in lines)
    for tag in ("[1/3] stock verl", "[2/3] split placement, overlaps off", "[3/3] split placement, overlaps on"):
        assert f"{tag}: step {STEPS}/{STEPS} " in console, tag
    assert "ray init kwargs" not in console  # verl's own output stays in the logs
    assert len(lines) < 100, console
