"""``verl-split advise`` on HybridFlow's placement experiments (EuroSys'25 §8.3): what it ranks first, held.

The profiles and every number's source are in ``hybridflow_profiles``; the table is in docs/advise.md ("Checked
against HybridFlow"). A change to the cost model or the generation lane that moves a cell fails here, and the
doc's table is to be regenerated with ``python tests/support/hybridflow_profiles.py``.
"""

from __future__ import annotations

import pytest
from support.hybridflow_profiles import GPU_COUNTS, PAIRS, SERIAL_SHARE, profile, table
from support.paths import DATA, ROOT

from verl_split.placement import Cluster
from verl_split.tools.advise.candidates import rank
from verl_split.tools.advise.generation import RolloutJob, best_tp, seconds

pytestmark = pytest.mark.unit

DOC = ROOT / "docs" / "advise.md"
#: advise's first candidate per (pair, GPUs): colocate ("all") or an even split ("halves").
EXPECTED = {
    ("13B / 13B", 16): "colocate", ("13B / 13B", 32): "colocate", ("13B / 13B", 64): "colocate",
    ("13B / 13B", 96): "colocate", ("13B / 13B", 128): "split",
    ("34B / 34B", 16): "colocate", ("34B / 34B", 32): "split", ("34B / 34B", 64): "split",
    ("34B / 34B", 96): "split", ("34B / 34B", 128): "split",
    ("13B / 70B", 16): "colocate", ("13B / 70B", 32): "colocate", ("13B / 70B", 64): "colocate",
    ("13B / 70B", 96): "colocate", ("13B / 70B", 128): "colocate",
}  # fmt: skip


@pytest.fixture(scope="module")
def rows():
    return table()


def test_the_ranking_on_hybridflows_profiles(rows):
    assert {(pair, n): got for pair, n, _, got, *_ in rows} == EXPECTED


def test_the_docs_table_is_this_ranking(rows):
    doc = DOC.read_text()
    for pair, n, published, got, placement, speedup, tp in rows:
        assert f"| {pair} | {n} | {published} | {got} (`{placement}`) | {speedup:.2f}x | {tp} |" in doc


def test_colocation_wins_on_few_gpus_and_a_split_only_on_many(rows):
    """The direction HybridFlow measured: where advise picks a split, it does so at every larger size too."""
    for actor, critic in PAIRS:
        picks = [got for pair, _, _, got, *_ in rows if pair == f"{actor} / {critic}"]
        first_split = next((i for i, got in enumerate(picks) if got == "split"), len(picks))
        assert picks[0] == "colocate" and all(got == "split" for got in picks[first_split:])


def test_the_serial_share_reproduces_hybridflows_scaling_efficiency():
    efficiency = (1 + 7 * SERIAL_SHARE) / (1 + 127 * SERIAL_SHARE)  # 128 GPUs against 8, Amdahl
    assert efficiency == pytest.approx(0.668)


def test_generation_depends_on_tp_and_kv_room():
    job = RolloutJob(13e9, 819_200, 40, 1024, 1024, 1024, 74.5)
    # Less KV room (more training state left beside vLLM): more waves, slower.
    assert seconds(job, 16, 8, 30.0, 2e12) > seconds(job, 16, 8, 5.0, 2e12)
    # A replica too small for the weights and one sequence's KV cache does not fit at all.
    assert seconds(job, 16, 1, 60.0, 2e12) is None
    # Many GPUs reach the latency floor: doubling them no longer halves generation.
    t64, t128 = seconds(job, 64, 8, 2.0, 2e12), seconds(job, 128, 8, 2.0, 2e12)
    t8, t16 = seconds(job, 8, 8, 2.0, 2e12), seconds(job, 16, 8, 2.0, 2e12)
    assert t8 / t16 > t64 / t128
    tp, _ = best_tp(job, 16, 30.0, 2e12)
    assert tp == 8  # the weights' share and the KV room both favour the largest TP within a node here


@pytest.mark.parametrize("gpus", GPU_COUNTS)
def test_every_ranked_layout_is_the_planners(gpus):
    model = profile("13B", "13B")
    candidates, rejected = rank(model, Cluster(gpus // 8, 8))
    assert candidates and all(c.prediction.step_s < float("inf") for c in candidates)


# --------------------------------------------------------------------------- the lane fitted to a real job's runs

REAL_LOG = DATA / "deepseek7b_megatron_ppo_4gpu.log"


def test_a_real_jobs_generation_lane_is_fitted_to_its_run():
    from verl_split.tools.advise import advise

    advice = advise([REAL_LOG], Cluster(2, 8), gpu_gb=80)
    gen = advice.model.lanes["gen"]
    assert hasattr(gen, "choose") and gen.sizes == (4,)
    # One run: the bandwidth is the one that gives its measured generation back, on its pool at its TP 4.
    assert gen.time(4, True) == pytest.approx(advice.runs[0].lanes["gen"].mean, rel=0.02)
    assert gen.tps == (1, 2, 4)  # the job's TP and its divisors: whole replicas wherever TP 4 has them
    assert any(line.startswith("generation by the KV-room model") for line in advice.assumptions)
    # The KV cache per token from the model config the workers printed (MHA: 32 KV heads of 128), held at the
    # runs' mean lengths (prompt_length/mean + response_length/mean).
    run = advice.runs[0]
    assert run.model_shape == {"layers": 30, "kv_heads": 32, "head_dim": 128, "hidden": 4096}
    assert gen.job.kv_bytes_per_token == 2 * 30 * 32 * 128 * 2 and 200 < gen.job.kv_len < 300
    assert "from the model config the log prints" in advice.assumptions[0]


def test_without_the_gpus_size_generation_keeps_amdahls_lane():
    from verl_split.tools.advise import advise

    advice = advise([REAL_LOG], Cluster(2, 8))
    assert not hasattr(advice.model.lanes["gen"], "choose")
    assert "the KV-room model needs --gpu-memory" in advice.assumptions[0]
