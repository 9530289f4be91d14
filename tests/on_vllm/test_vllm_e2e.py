"""verl-split on the real vLLM (vLLM's CPU build), end to end: the few runs that carry the most, on both trainers.

- The v1 trainer (``shared_v1``): split placement ``halves`` with every overlap on (the deferred critic update
  among them) and rollout on both pools, 3 steps, a checkpoint after step 2. Step 1's critic update ends only once
  step 2's generation has begun (``SLOW_CRITIC_HOLD_STEPS``), and the late join is forced
  (``VERL_SPLIT_LATE_JOIN=always``): in step 2 the critic pool joins generation late. In step 1 the actor pool's
  server, after its first request, waits until the critic pool's has begun one (``SLOW_GENERATE_AWAIT``), so the
  critic pool certainly generates part of that step. In step 2 the actor pool's vLLM server takes every request at
  once, before the late join (no cap held them back in the balancer), so the critic pool joins and finds none left:
  what it takes then is not checked here (the cpu_hf runs check it, tests/e2e/). Then a resume from step 2's
  checkpoint (``resumed_v1``, ``--extended``: CI checks resume bit for bit on ``cpu_hf``) runs step 3 again.
- ``RayPPOTrainer`` (``dies_v0``): the same placement, overlaps and shared rollout, a checkpoint after every step;
  in step 2 the actor pool's vLLM server process exits at its second request (``SLOW_ROLLOUT_DIE``): verl-split's
  watchdog must name it and end the run, with step 1's checkpoint intact (stock verl waits on a dead vLLM server
  with no deadline).
- After every run, failed or not, no shared-memory segment it made is left in /dev/shm.

The weights pushed to the critic pool's server are checked through verl's rollout-against-actor metrics: verl
starts every vLLM server with dummy (random) weights, so in a step where the critic pool's server generated part
of the batch, the correlation of the rollout's and the actor's probabilities over the whole batch stays near 1 only
if its samples came from the actor's weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.ppo_run import last_checkpoint
from support.vllm_runs import run_vllm, split_env, vllm_assets, vllm_overrides

pytestmark = pytest.mark.vllm

#: The rollout's probabilities against the actor's, over each step's batch (verl's metrics): the same weights
#: give a correlation of 1 up to float noise; vLLM's dummy weights, none.
MIN_PROBS_CORRELATION = 0.999
#: verl's rollout-vs-actor log-perplexity gap: 0.19-0.21 with a model vocabulary larger than the tokenizer's
#: (verl's vLLM server masks the extra ids, the actor does not); the ``vllm`` assets' vocabulary is the tokenizer's.
MAX_LOG_PPL_DIFF = 1e-3
#: Step 3 of the resumed run against the uninterrupted one's: vLLM on the CPU samples differently from run to
#: run, so only what the restored weights decide, on a near-uniform tiny model, is compared.
RESUME_ENTROPY_TOLERANCE = 1e-2


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return vllm_assets(tmp_path_factory.mktemp("vllm_assets"))


@pytest.fixture(scope="module")
def shared_v1(assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm_v1")
    env = split_env(out, VERL_SPLIT_LATE_JOIN="always", SLOW_CRITIC_HOLD_STEPS="1", SLOW_GENERATE_AWAIT="1@1")
    run, left = run_vllm(vllm_overrides(assets, out, "v1", 3, 2, out / "checkpoints"), out, env)
    return out, run, left


@pytest.fixture(scope="module")
def resumed_v1(assets, shared_v1, tmp_path_factory):
    """From the v1 run's checkpoint of step 2 (verl saves the last step too: the copy holds step 2's only)."""
    first_out, first, _ = shared_v1
    first.assert_ok()
    out = tmp_path_factory.mktemp("vllm_v1_resumed")
    shutil.copytree(first_out / "checkpoints" / "global_step_2", out / "checkpoints" / "global_step_2")
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")  # verl's own marker
    overrides = vllm_overrides(assets, out, "v1", 3, 2, out / "checkpoints", resume=True)
    run, left = run_vllm(overrides, out, split_env(out))
    return run, left


@pytest.fixture(scope="module")
def dies_v0(assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm_v0")
    env = split_env(out, SLOW_ROLLOUT_DIE="0@2")
    run, left = run_vllm(vllm_overrides(assets, out, "v0", 3, 1, out / "checkpoints"), out, env)
    return out, run, left


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "updates.jsonl").read_text().splitlines()]


def test_split_overlaps_deferral_and_shared_rollout_on_vllm_v1(shared_v1):
    out, run, _ = shared_v1
    run.assert_ok()
    assert [m["step"] for m in run.metrics] == [1, 2, 3], run.log[-4000:]
    assert "shared rollout: 1 rollout replica(s) on the critic pool (replica ranks [1]" in run.log
    first, second, third = run.metrics
    assert first["split/overlapped"] == 1.0 and first["split/critic_update_deferred"] == 1.0
    # Step 1: the critic pool's vLLM server generated part of the batch from the start.
    assert first["split/critic_pool_joined"] == 1.0 and 0.0 < first["split/critic_pool_rollout_share"] < 1.0
    # Step 2: step 1's critic update ran on past the weight sync (held), and the critic pool joined late.
    assert second["split/critic_pool_joined"] == 1.0 and second["split/critic_pool_join_s"] > 0.0, second
    assert "shared rollout: the critic pool joined step 2's generation after the critic's update" in run.log
    generated = {(r["replica"], r["weights"]) for r in _records(out) if r["phase"] == "generate"}
    assert {(0, 0), (1, 0), (0, 1), (0, 2)} <= generated, sorted(generated)
    for key in ("actor/pg_loss", "critic/vf_loss", "actor/entropy", "split/speedup"):
        run.assert_finite(key)


def test_the_critic_pool_s_vllm_server_samples_with_the_actor_s_weights(shared_v1):
    _, run, _ = shared_v1
    run.assert_ok()
    shares = run.series("split/critic_pool_rollout_share")
    correlations = run.series("training/rollout_actor_probs_pearson_corr")
    assert len(correlations) == 3 and shares[0] > 0.0, (shares, correlations)
    assert min(correlations) > MIN_PROBS_CORRELATION, (shares, correlations)
    gaps = [abs(v) for v in run.series("rollout_corr/log_ppl_diff")]
    assert gaps and max(gaps) < MAX_LOG_PPL_DIFF, gaps


@pytest.mark.extended(reason="resume is checked bit for bit on cpu_hf in CI (tests/e2e/test_checkpoint_e2e.py)")
def test_resume_from_a_vllm_run_s_checkpoint(shared_v1, resumed_v1):
    _, first, _ = shared_v1
    resumed, _ = resumed_v1
    resumed.assert_ok()
    assert [m["step"] for m in resumed.metrics] == [3], resumed.log[-4000:]
    (again,) = resumed.metrics
    assert again["actor/entropy"] == pytest.approx(first.metrics[2]["actor/entropy"], rel=RESUME_ENTROPY_TOLERANCE)
    assert again["training/rollout_actor_probs_pearson_corr"] > MIN_PROBS_CORRELATION


def test_a_vllm_server_that_dies_mid_generation_ends_the_run_naming_it(dies_v0):
    """The actor pool's server (replica 0) exits at its second request of step 2; the watchdog names it, the run
    ends with verl-split's error, and step 1's checkpoint is intact."""
    out, run, _ = dies_v0
    assert run.returncode != 0, run.log[-4000:]
    assert [m["step"] for m in run.metrics] == [1], run.log[-4000:]
    assert [r["died"] for r in _records(out) if "died" in r] == [0]
    assert (
        "SharedRolloutError: shared rollout: generation stopped: the rollout server of replica 0 (actor pool) died"
        in run.log
    ), run.log[-4000:]
    assert last_checkpoint(out / "checkpoints") == 1
    assert not (out / "checkpoints" / "global_step_2").exists()


@pytest.mark.parametrize(
    "which",
    [
        "shared_v1",
        pytest.param("resumed_v1", marks=pytest.mark.extended(reason="the resumed run is --extended")),
        "dies_v0",
    ],
)
def test_no_shared_memory_segment_is_left_after_a_run(which, request):
    """vLLM's message queues and verl's weight buckets outlive the run's processes; the runner removes them."""
    left = request.getfixturevalue(which)[-1]
    assert left == []
