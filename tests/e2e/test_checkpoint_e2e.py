"""Checkpoints under split placement, end to end: a resumed run continues as the uninterrupted one.

Stock ``main_ppo`` on CPU with ``VERL_SPLIT=1`` (both pools, every overlap on), two runs of the same
job: 4 steps with ``trainer.save_freq=2``, whose step-2 checkpoint is saved while step 2's critic
update runs on into step 3 (``defer_critic``: the save joins it first); then, from a folder holding
only that checkpoint, ``trainer.resume_mode=auto`` for 4 steps in all. Steps 3-4 of the resumed run
must log what the uninterrupted run logged, and the final weights must be equal: bit for bit on
``RayPPOTrainer`` (v0). The CPU rollout seeds its sampling from the global step verl passes with each
weight sync (or the weights themselves on 0.7), not from a count that restarts on resume. Where the trainer
has shared rollout (v1; v0 from 0.8 on) the runs generate on both pools, and the critic pool joins step 4's
generation late, after step 3's deferred critic update (``LATE_JOIN``), in the uninterrupted and the resumed
run alike. On v1 the uninterrupted run is the shared-rollout run test_shared_rollout_e2e.py checks
(``shared_rollout_run``, tests/conftest.py): this job, made once.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from support.families import FAMILY
from support.ppo_run import (
    CHECKPOINTED_STEPS,
    LATE_JOIN,
    SAVED_STEP,
    PPORun,
    checkpointed_overrides,
    plugin_env,
    run_main_ppo,
)

from verl_split.core import compat

pytestmark = pytest.mark.e2e

STEPS = CHECKPOINTED_STEPS
SAVED = SAVED_STEP
# Per-step metrics that say what was generated and what was learnt from it; timings and
# throughput differ between any two runs and are left out.
COMPARED = (
    "response_length/mean",
    "response_length/max",
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/advantages/mean",
    "critic/values/mean",
    "critic/vf_loss",
    "actor/pg_loss",
    "actor/entropy",
    "actor/ppo_kl",
    "actor/grad_norm",
    "critic/grad_norm",
)
#: v1's tolerances, those of the overlap tests (tests/e2e/test_overlap_e2e.py): v1 assembles a step's
#: samples in the order rollouts finish, so batch sums may differ in their last bits, which Adam can
#: grow to a fraction of one step on the weights.
V1_METRIC_TOL, V1_WEIGHT_TOL = 1e-5, 1e-3


def _shared(trainer: str) -> bool:
    """The trainer has shared rollout on this verl: the v1 trainer, or RayPPOTrainer from 0.8 on."""
    return trainer == "v1" or compat.verl_in(compat.SHARED_ROLLOUT_V0)


def _env(out: Path, trainer: str) -> dict[str, str]:
    if _shared(trainer):
        return plugin_env(out, VERL_SPLIT="1", VERL_SPLIT_PLACEMENT="halves", RAY_DEDUP_LOGS="0", **LATE_JOIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    env["VERL_SPLIT"] = "1"
    return env


def _run(tiny_assets, out: Path, trainer: str, ckpt_dir: Path, resume: bool) -> PPORun:
    out.mkdir(parents=True, exist_ok=True)
    overrides = checkpointed_overrides(tiny_assets, out, trainer, ckpt_dir, resume)
    run = run_main_ppo(overrides, out, env=_env(out, trainer), timeout=420)
    run.assert_ok()
    return run


def _by_step(run: PPORun) -> dict[int, dict]:
    return {int(m["step"]): m for m in run.metrics if "step" in m}


def _weights(ckpt_dir: Path, role: str) -> dict[str, torch.Tensor]:
    step = ckpt_dir / f"global_step_{STEPS}" / role
    files = sorted(step.glob("model_world_size_*_rank_*.pt"))
    assert files, f"no {role} weights under {step}"
    weights: dict[str, torch.Tensor] = {}
    for path in files:  # one shard per rank; full tensors once gathered
        for key, value in torch.load(path, weights_only=False).items():
            tensor = value.full_tensor() if hasattr(value, "full_tensor") else value
            weights[f"{path.name}:{key}"] = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return weights


#: On a family with the v1 trainer, CI resumes v1 (from the shared-rollout run) and leaves v0 to --extended; on 0.7
#: and 0.8 (RayPPOTrainer only) this file runs in `make test-release` (not in CI: its time).
TRAINERS = ["v0"]
if compat.family_in(FAMILY, compat.V1_TRAINER):
    TRAINERS = [pytest.param("v0", marks=pytest.mark.extended), "v1"]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_resume_continues_as_the_uninterrupted_run(tiny_assets, tmp_path, trainer, request):
    if trainer == "v1":  # the shared-rollout run is this job, uninterrupted (tests/conftest.py)
        whole_dir, whole = request.getfixturevalue("shared_rollout_run")
        whole.assert_ok()
        whole_ckpt = whole_dir / "checkpoints"
    else:
        whole_ckpt = tmp_path / "whole_ckpt"
        whole = _run(tiny_assets, tmp_path / "whole", trainer, whole_ckpt, resume=False)
    # Step 2's critic update was left running into step 3 and joined by the save: the checkpoint resumed from.
    assert _by_step(whole)[SAVED].get("split/critic_update_deferred") == 1.0, _by_step(whole)[SAVED]
    saved = whole_ckpt / f"global_step_{SAVED}"
    assert saved.is_dir()
    shutil.copytree(saved, tmp_path / "ckpt" / saved.name)
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text(str(SAVED))  # verl's own marker
    resumed = _run(tiny_assets, tmp_path / "resumed", trainer, tmp_path / "ckpt", resume=True)

    expected, got = _by_step(whole), _by_step(resumed)
    assert sorted(got) == list(range(SAVED + 1, STEPS + 1)), f"the resumed run logged steps {sorted(got)}"
    if _shared(trainer):  # the critic pool joined the last step's generation late, in both runs
        for run in (expected, got):
            assert run[STEPS]["split/critic_pool_joined"] == 1.0 and run[STEPS]["split/critic_pool_join_s"] > 0.0
    for step in range(SAVED + 1, STEPS + 1):
        keys = [k for k in COMPARED if k in expected[step]]
        assert "response_length/mean" in keys and "actor/pg_loss" in keys and "critic/vf_loss" in keys, keys
        for key in keys:
            a, b = float(expected[step][key]), float(got[step][key])
            if trainer == "v0":
                assert a == b, f"step {step} {key}: uninterrupted {a}, resumed {b}"
            else:
                assert b == pytest.approx(a, rel=V1_METRIC_TOL, abs=V1_METRIC_TOL), f"step {step} {key}: {a} vs {b}"

    for role in ("actor", "critic"):
        a, b = _weights(whole_ckpt, role), _weights(tmp_path / "ckpt", role)
        assert sorted(a) == sorted(b)
        for name in a:
            if trainer == "v0":
                assert torch.equal(a[name], b[name]), f"{role} {name} differs after resume"
            else:
                torch.testing.assert_close(b[name], a[name], rtol=0, atol=V1_WEIGHT_TOL)
