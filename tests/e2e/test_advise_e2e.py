"""``verl-split advise --profile --cpu`` end to end: two real main_ppo runs on CPU (stock, halves with the
overlaps off), progress on the console, verl's output in each run's log, then a recommendation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from verl_split.dryrun.runner import METRICS_FILE, read_metrics

#: Two real runs: CI has advise on real runs through the demo's (test_demo_e2e.py) and --profile's
#: orchestration in the unit tests (test_advise_profile.py, a fake runner); this end-to-end run is extended.
pytestmark = [pytest.mark.e2e, pytest.mark.extended(reason="advise on real runs: test_demo_e2e.py")]

STEPS = 2
TIMEOUT_S = 600  # two runs of about a minute each on 2 cores


def test_profile_on_cpu_runs_both_layouts_and_recommends(tiny_assets, tmp_path):
    out = tmp_path / "advise"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    command = [sys.executable, "-m", "verl_split.tools.cli", "advise", "--profile", "--cpu", "--verbose"]
    command += ["--nnodes", "1"]
    command += ["--n-gpus-per-node", "2", "--steps", str(STEPS), "--out", str(out), "--assets", str(tiny_assets.root)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-6000:]

    stock = read_metrics(out / "stock" / METRICS_FILE)
    split = read_metrics(out / "halves_overlap_off" / METRICS_FILE)
    assert [m["step"] for m in stock] == [m["step"] for m in split] == list(range(1, STEPS + 1))
    assert not any(key.startswith("split/") for m in stock for key in m)
    assert {(m["split/actor_pool_gpus"], m["split/critic_pool_gpus"], m["split/overlapped"]) for m in split} == {
        (1.0, 1.0, 0.0)
    }
    for folder in ("stock", "halves_overlap_off"):
        assert (out / folder / "main_ppo.log").stat().st_size > 10_000, "verl's output belongs in the run's log"

    lines = proc.stdout.splitlines()
    for tag in ("[1/2] stock verl", "[2/2] halves, overlaps off"):
        assert any(line.startswith(f"{tag}: step {STEPS}/{STEPS} ") for line in lines), console
    assert "fitted to 1, 2 GPUs" in proc.stdout and "ASSUMED" not in proc.stdout
    assert any(line.startswith("recommended: split_placement.placement=") for line in lines), proc.stdout
    assert "ray init kwargs" not in console  # verl's own output stays in the logs
