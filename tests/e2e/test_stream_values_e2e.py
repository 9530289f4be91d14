"""Values streamed into generation's tail, end to end: stock ``main_ppo`` on CPU with ``VERL_SPLIT=1``, verl's v1
trainer, split placement (one logical GPU per pool).

The tail is forced, not timed: ``VERL_SPLIT_CPU_HOLD_AFTER`` makes the CPU rollout server answer its first
requests and hold the rest until the lane has valued those (``verl_split/runtime/cpu/hold.py``), so every step of
the streamed run values some samples while the rest still generate, whatever the machine's load. The critic's
forward runs one sample per micro-batch (the exactness gate, ``stream_values.why_not_exact``) in both runs.
"""

from __future__ import annotations

import pytest
from support.families import DEFAULT_TRAINER, FAMILY
from test_overlap_e2e import final_weights, run_split

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(FAMILY != "0.9" or DEFAULT_TRAINER != "v1", reason="verl 0.9's v1 trainer streams values"),
]

#: The critic's values forward one sample at a time, not cut by tokens: where streaming is exact. Its training
#: then needs a micro-batch size too (verl/workers/engine_workers.py TrainingWorker.train_mini_batch).
PER_SAMPLE_CRITIC = [
    "+critic.fsdp.use_dynamic_bsz=false",
    "+critic.fsdp.infer_micro_batch_size_per_gpu=1",
    "+critic.fsdp.micro_batch_size_per_gpu=2",
]
#: The server answers this many requests per step at once; the other 6 of the step's 8 wait for the lane.
HOLD_AFTER = "2"
STEPS = 2
#: Losses and weights of two v1 runs: v1 assembles a step's samples in the order they finish, so sums over the
#: batch may differ in their last bits between any two runs (test_overlap_e2e.test_overlap_changes_no_numbers).
TOLERANCE, WEIGHT_TOLERANCE = 1e-5, 1e-3
NUMBERS = (
    "critic/values/mean",
    "critic/values/max",
    "critic/values/min",
    "critic/advantages/mean",
    "critic/returns/mean",
    "critic/vf_loss",
    "actor/pg_loss",
    "actor/entropy",
    "critic/score/mean",
)


def run_pair_member(tiny_assets, out, switch: str):
    extra = [*PER_SAMPLE_CRITIC, f"trainer.save_freq={STEPS}"]
    env = {"VERL_SPLIT_STREAM_VALUES": switch, "VERL_SPLIT_CPU_HOLD_AFTER": HOLD_AFTER}
    return out, run_split(tiny_assets, out, STEPS, extra, trainer="v1", **env)


@pytest.fixture(scope="module")
def streamed(tiny_assets, tmp_path_factory):
    return run_pair_member(tiny_assets, tmp_path_factory.mktemp("streamed"), "on")


@pytest.fixture(scope="module")
def unstreamed(tiny_assets, tmp_path_factory):
    return run_pair_member(tiny_assets, tmp_path_factory.mktemp("unstreamed"), "off")


def test_values_stream_into_the_forced_tail(streamed):
    _, run = streamed
    run.assert_ok()
    assert run.series("split/stream_values_off") == [0.0] * STEPS
    coverage = run.series("split/stream_coverage")
    assert len(coverage) == STEPS and all(c > 0 for c in coverage), coverage
    assert all(s > 0 for s in run.series("split/stream_values_s"))
    assert "Streamed values (step 1)" in run.log


@pytest.mark.extended(
    reason="a second run of the job (about 75 s on 2 cores); the default suite shows the streamed run and the "
    "coordination rules (tests/runtime/overlap/test_stream_values.py)"
)
def test_streaming_changes_no_numbers(streamed, unstreamed):
    """Same values (bit for bit in step 1 in the runs measured: mean, max, min), advantages, losses and weights.
    Within v1's tolerance: v1 assembles a step's samples in the order they finish, so sums over the batch (the
    advantages' whitening, the losses) may differ in their last bits between any two runs, and from step 2 on the
    critic's weights with them."""
    streamed_dir, streamed_run = streamed
    unstreamed_dir, unstreamed_run = unstreamed
    streamed_run.assert_ok()
    unstreamed_run.assert_ok()
    assert unstreamed_run.series("split/stream_values_off") == [1.0] * STEPS
    assert "Values are not streamed into generation's tail: VERL_SPLIT_STREAM_VALUES is off." in unstreamed_run.log
    for key in NUMBERS:
        a, b = streamed_run.series(key), unstreamed_run.series(key)
        assert len(a) == len(b) == STEPS, key
        assert a == pytest.approx(b, rel=TOLERANCE, abs=TOLERANCE), key
    for role in ("actor", "critic"):
        a, b = final_weights(streamed_dir, role), final_weights(unstreamed_dir, role)
        assert a.keys() == b.keys()
        for name in a:
            assert (a[name] - b[name]).abs().max() <= WEIGHT_TOLERANCE, f"{role} {name} differs"


@pytest.mark.extended(reason="a third run (about 50 s); the failure's message and release: test_stream_values.py")
def test_a_failed_streamed_micro_batch_ends_the_run_naming_the_critic(tiny_assets, tmp_path):
    """Step 2's streamed values fail on the critic (the test plugin: every values call after the critic's first
    update); the run ends at that step's end of generation, naming the critic's pool, with step 1's checkpoint."""
    env = {"VERL_SPLIT_CPU_HOLD_AFTER": HOLD_AFTER, "SLOW_PREP_FAIL_AFTER_UPDATE": "critic"}
    run = run_split(tiny_assets, tmp_path, 3, [*PER_SAMPLE_CRITIC, "trainer.save_freq=1"], trainer="v1", **env)
    assert run.returncode != 0
    assert "the critic's streamed values failed on resource pool 'critic_pool' (step 2)" in run.log, run.log[-4000:]
    assert "injected failure in the critic's infer_batch after its first update" in run.log
    saved = sorted(p.name for p in (tmp_path / "checkpoints").glob("global_step_*"))
    assert saved == ["global_step_1"], saved
    for role in ("actor", "critic"):
        assert final_weights(tmp_path, role)  # step 1's checkpoint loads, every shard
