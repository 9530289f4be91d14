"""``examples/split_placement/main_ppo_split.py`` trains on CPU with no ``VERL_SPLIT`` in the shell.

Runs the example the way a user does, ``bash run_tiny_cpu.sh``, which makes the tiny assets and
starts ``main_ppo_split.py`` with the CPU dry run's overrides (verl_split/tools/demo.py): real verl, Ray,
torch and FSDP2 workers; the rollout engine is verl-split's CPU stand-in for vLLM. The script
switches verl-split on by itself, so the pools and the overlapped updates prove it was on in the
launching process, in the TaskRunner and in the workers.
"""

from __future__ import annotations

import os
import sys

import pytest
from support.paths import EXAMPLE

from verl_split.dryrun.runner import METRICS_FILE, read_metrics, run_logged

pytestmark = pytest.mark.e2e

STEPS = 2
TIMEOUT_S = 900


def test_main_ppo_split_switches_itself_on_and_overlaps(tiny_assets, tmp_path):
    out = tmp_path / "example"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    env.update(
        PYTHON=sys.executable,
        OUT=str(out),
        STEPS=str(STEPS),
        GPUS="2",
        ASSETS=str(tiny_assets.root),
        VERL_SPLIT_CPU="1",
    )
    log_path = tmp_path / "run_tiny_cpu.log"
    # Its own process group, killed whole on a timeout, so Ray and every worker end with it.
    done = run_logged(
        ["bash", str(EXAMPLE / "run_tiny_cpu.sh")], env, tmp_path, log_path, out / METRICS_FILE, timeout=TIMEOUT_S
    )
    text = log_path.read_text(errors="replace")
    ended = f"timed out after {TIMEOUT_S} s" if done.timed_out else f"exited with {done.returncode}"
    assert done.returncode == 0 and not done.timed_out, f"run_tiny_cpu.sh {ended}:\n{text[-6000:]}"

    # Launching process: the runtime_env seam put VERL_SPLIT into what run_ppo hands ray.init.
    ray_init = next(line for line in text.splitlines() if line.startswith("ray init kwargs:"))
    assert "'VERL_SPLIT': '1'" in ray_init
    # TaskRunner: the planned pools, not verl's global_pool.
    assert "Creating resource pool: actor_rollout_ref_pool with [1] GPUs" in text
    assert "Creating resource pool: critic_pool with [1] GPUs" in text
    assert "Creating resource pool: global_pool" not in text
    assert "Starting parallel actor and critic updates" in text

    metrics = read_metrics(out / METRICS_FILE)
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    for step in metrics:
        assert step["split/overlapped"] == 1.0, step
        assert step["split/overlap_s"] > 0.0, step
        for key in ("critic/vf_loss", "actor/pg_loss"):
            assert key in step, sorted(step)
