"""Rollout on both pools on ``RayPPOTrainer`` (verl 0.9 with ``trainer.use_v1=false``), end to end, as GPUs run it
by default: the late join off, and a rollout server that dies in the middle of a generation.

Stock ``main_ppo`` on CPU, ``VERL_SPLIT=1``, placement ``halves`` on 2 logical GPUs (one per pool), every overlap on
(the deferred critic update included) and shared rollout with ``VERL_SPLIT_LATE_JOIN=off``: what a GPU run of
shared rollout gets by default (``auto`` is off on GPUs). The stand-ins of every CPU dry run: verl-split's CPU
rollout (Hugging Face ``generate`` for vLLM) and its object-store checkpoint engine for verl's NCCL one. The
coordinator is the v1 trainer's (``tests/e2e/test_shared_rollout_e2e.py``, where the critic pool joins late); what
differs here is where it hooks in (``runtime/shared_rollout/hooks.py``: ``init_workers`` and
``LLMServerManager.get_client``), where its metrics go (verl's tracker), and how generation fails (verl's agent
loop gathers its samples without ``return_exceptions``). Every decision is forced by the test plugin
(tests/support/plugins/slow_updates.py), so nothing depends on the machine's load:

- step 1: the critic pool generates from the start (the first weights are pushed at start-up; the actor pool's
  server waits after its first request until the critic pool's has begun one, ``SLOW_GENERATE_AWAIT``, as in
  step 3);
- step 2: step 1's critic update ends only once step 2's generation has begun (``SLOW_CRITIC_HOLD_STEPS``), so it
  runs on past the weight sync and the critic pool sits the step out, parked, its replica asleep;
- step 3: step 2's update was joined by the checkpoint's save, so the weight sync wakes the critic pool, pushes
  it the weights and opens it: it generates from the start, and its server's process exits at its second request
  (``SLOW_ROLLOUT_DIE``), in the middle of the generation. The run must stop with verl-split's error naming the
  replica, step 2's checkpoint intact.

Steps 1 and 2 are compared with the same job's split run without shared rollout that the session has already:
the example's (``example_run``, tests/conftest.py, on verl's default trainer: v1 on 0.9, whose numbers differ
from ``RayPPOTrainer``'s only by the float summation order of its TransferQueue batches, 1e-8 here; so within v1's
tolerance, as test_shared_rollout_e2e.py compares). The v1 trainer's own GPU default is the same coordinator's
sit-out (tests/runtime/shared_rollout/test_shared_rollout_late_join.py, with verl's objects faked).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.ppo_run import SAVED_STEP, checkpointed_overrides, last_checkpoint, plugin_env, run_main_ppo

from verl_split.core import compat
from verl_split.dryrun.runner import METRICS_FILE, read_metrics

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not compat.verl_in(compat.SHARED_ROLLOUT_V0), reason="no shared rollout on RayPPOTrainer here"),
]

#: The forced decisions above; each request takes 0.25 s longer and logs itself (8 requests a step).
FORCED = {
    "VERL_SPLIT_SHARED_ROLLOUT": "1",
    "VERL_SPLIT_LATE_JOIN": "off",
    "SLOW_GENERATE_SLEEP": "0.25",
    "SLOW_CRITIC_HOLD_STEPS": "1",
    "SLOW_GENERATE_AWAIT": "1@1,3",
    "SLOW_ROLLOUT_DIE": "1@3",
}
#: v1's float summation noise (tests/e2e/test_shared_rollout_e2e.py), against the example's run on v1 (0.9).
TOLERANCE = 1e-5
COMPARED = (
    "response_length/mean",
    "critic/score/mean",
    "critic/advantages/mean",
    "critic/values/mean",
    "critic/vf_loss",
    "critic/grad_norm",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
)


def _env(out: Path, **env: str) -> dict[str, str]:
    return plugin_env(out, VERL_SPLIT="1", VERL_SPLIT_PLACEMENT="halves", RAY_DEDUP_LOGS="0", **env)


@pytest.fixture(scope="module")
def shared_and_plain(tiny_assets, tmp_path_factory, example_run):
    """The shared-rollout run above (4 steps asked, a checkpoint every 2; it dies in step 3), and the metrics of the
    example's run of the same job without shared rollout (its steps 1 and 2)."""
    out = tmp_path_factory.mktemp("v0_shared")
    overrides = checkpointed_overrides(tiny_assets, out, "v0", out / "checkpoints", resume=False)
    shared = run_main_ppo(overrides, out, env=_env(out, **FORCED))
    example_out, example, console = example_run
    assert example.returncode == 0, console[-6000:]
    return out, shared, read_metrics(example_out / METRICS_FILE)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "updates.jsonl").read_text().splitlines()]


def test_the_critic_pool_sits_out_the_step_its_update_runs_into_and_generates_in_the_others(shared_and_plain):
    out, run, _ = shared_and_plain
    assert "shared rollout: 1 rollout replica(s) on the critic pool (replica ranks [1]" in run.log
    assert [m["step"] for m in run.metrics] == [1, 2], run.log[-4000:]
    first, second = run.metrics
    # Step 1: both pools from the start.
    assert 0.0 < first["split/critic_pool_rollout_share"] < 1.0 and first["split/critic_pool_joined"] == 1.0
    assert first["split/critic_update_deferred"] == 1.0
    # Step 2: step 1's critic update ran on past the sync: the actor pool generated alone, the critic pool's
    # replica slept on (no push, no request), and no late join was tried.
    assert second["split/critic_pool_rollout_share"] == 0.0 and second["split/critic_pool_joined"] == 0.0
    assert "split/critic_pool_join_s" not in second and "the critic pool joined" not in run.log
    records = _records(out)
    generated = {(r["replica"], r["weights"]) for r in records if r["phase"] == "generate"}
    assert {(0, 0), (1, 0), (0, 1)} <= generated and (1, 1) not in generated, sorted(generated)
    assert not re.search(r"replica 1 loaded \d+ tensors \(step 1\)", run.log)
    critic = [r for r in records if r.get("role") == "critic" and r["phase"] == "update"]
    critic_ends = sorted(r["end"] for r in critic if "end" in r)
    step_2_began = min(r["start"] for r in records if r["phase"] == "generate" and r["weights"] == 1)
    assert critic_ends[0] > step_2_began  # the hold: step 1's update ran on past the sync, as it was forced to
    # Step 3: after the sit-out, a sync with no update running wakes, pushes and opens the critic pool again.
    assert re.search(r"replica 1 loaded \d+ tensors \(step 2\)", run.log)
    assert (1, 2) in generated  # its first request of step 3, before its process exited at the second


def test_same_numbers_as_without_shared_rollout(shared_and_plain):
    """The CPU rollout seeds each sample from its prompt and the weights' step, not the replica: the losses of the
    steps the run finished are those of the same job without shared rollout."""
    _, shared, plain = shared_and_plain
    assert [m["step"] for m in plain] == [1, 2] and "split/critic_pool_rollout_share" not in plain[0]
    for key in COMPARED:
        without = [float(step[key]) for step in plain]
        assert shared.series(key) == pytest.approx(without, rel=TOLERANCE, abs=TOLERANCE), key


def test_a_server_that_dies_mid_generation_ends_the_run_naming_it(shared_and_plain):
    """verl's agent loop gathers its samples without ``return_exceptions``: the first request to the dead server
    ends the trainer's generation call with Ray's own error. The generation watchdog names the replica instead,
    Ray's error attached, and parks the server; the last checkpoint, step 2's, is intact."""
    out, run, _ = shared_and_plain
    assert run.returncode != 0
    assert [r["died"] for r in _records(out) if "died" in r] == [1]
    assert (
        "SharedRolloutError: shared rollout: generation stopped: the rollout server of replica 1 (critic pool) died "
        "(Ray records its server's actor as dead). It is parked" in run.log
    ), run.log[-4000:]
    assert last_checkpoint(out / "checkpoints") == SAVED_STEP
    assert not (out / "checkpoints" / f"global_step_{SAVED_STEP + 1}").exists()
