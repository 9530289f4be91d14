"""``examples/split_placement/main_ppo_split.py`` trains on CPU with no ``VERL_SPLIT`` in the shell.

Runs the example the way a user does, ``bash run_tiny_cpu.sh`` (``example_run`` in tests/conftest.py), which makes
the tiny assets and starts ``main_ppo_split.py`` with the CPU dry run's overrides (verl_split/tools/demo.py): real
verl, Ray, torch and FSDP2 workers; the rollout engine is verl-split's CPU stand-in for vLLM. The script
switches verl-split on by itself, so the pools and the overlapped updates prove it was on in the
launching process, in the TaskRunner and in the workers.
"""

from __future__ import annotations

import pytest
from support.ppo_run import EXAMPLE_STEPS, EXAMPLE_TIMEOUT_S

from verl_split.dryrun.runner import METRICS_FILE, read_metrics

pytestmark = pytest.mark.e2e


def test_main_ppo_split_switches_itself_on_and_overlaps(example_run):
    out, done, text = example_run
    ended = f"timed out after {EXAMPLE_TIMEOUT_S} s" if done.timed_out else f"exited with {done.returncode}"
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
    assert [m["step"] for m in metrics] == list(range(1, EXAMPLE_STEPS + 1))
    for step in metrics:
        assert step["split/overlapped"] == 1.0, step
        assert step["split/overlap_s"] > 0.0, step
        for key in ("critic/vf_loss", "actor/pg_loss"):
            assert key in step, sorted(step)
