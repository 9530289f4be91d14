"""The one-GPU demo's layout on a real local Ray: two logical GPUs declared, the job's runtime_env showing one.

``python -m verl_split.dryrun.gpu_probe`` as the GPU run (``scripts/gpu_run.sh``) runs it: verl-split's default
plan, its pools made as a run makes them, a worker of verl's own ``RayWorkerGroup`` in each. On this CPU machine
Ray's bookkeeping is what is checked (no device to name): each pool's worker is shown ``CUDA_VISIBLE_DEVICES=0``,
although Ray gave the second pool GPU slot 1 (Ray >= 2.60 maps a slot past that one-entry list onto it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from verl_split.dryrun.gpu_probe import one_device

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(300)]


def test_each_pools_worker_sees_the_one_device_the_job_shows_it():
    done = subprocess.run(
        [sys.executable, "-m", "verl_split.dryrun.gpu_probe"],
        capture_output=True,
        text=True,
        timeout=240,
        # The shell shows one GPU, as a user's may: the probe takes it, and keeps it from the raylet (which would
        # refuse the two logical GPUs it is told of: "Attempting to start raylet with 2 GPU").
        env={**os.environ, "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": "0"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    views = dict(line.split(": ", 1) for line in done.stdout.splitlines() if line.endswith("}"))
    seen = {pool: json.loads(view) for pool, view in views.items()}
    assert set(seen) == {"actor_rollout_ref_pool", "critic_pool"}
    assert {view["CUDA_VISIBLE_DEVICES"] for view in seen.values()} == {"0"}
    assert sorted(id for view in seen.values() for id in view["ray_gpu_ids"]) == ["0", "0"]
    assert done.stdout.rstrip().endswith("same device: True")


@pytest.mark.parametrize(
    ("views", "same"),
    [
        (
            {"a": {"CUDA_VISIBLE_DEVICES": "0", "uuid": "GPU-1"}, "b": {"CUDA_VISIBLE_DEVICES": "0", "uuid": "GPU-1"}},
            True,
        ),
        ({"a": {"CUDA_VISIBLE_DEVICES": "0"}, "b": {"CUDA_VISIBLE_DEVICES": "0"}}, True),  # no GPU to name
        ({"a": {"CUDA_VISIBLE_DEVICES": "0"}, "b": {"CUDA_VISIBLE_DEVICES": "1"}}, False),  # Ray < 2.60's mapping
        (
            {"a": {"CUDA_VISIBLE_DEVICES": "0", "uuid": "GPU-1"}, "b": {"CUDA_VISIBLE_DEVICES": "0", "uuid": "GPU-2"}},
            False,
        ),
    ],
)
def test_one_device_means_one_visible_id_and_one_uuid(views, same):
    assert one_device(views, "0") is same
