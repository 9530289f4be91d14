"""``verl-split advise`` reading runs: verl's file logger format, stock and split layouts, lanes, the errors."""

from __future__ import annotations

import json

import pytest
from support.advise_profiles import SUBLINEAR, run_file, split_step, stock_step, write_run

from verl_split.placement import Cluster
from verl_split.tools.advise.runs import AdviseError, lane_times, read_records, read_run

pytestmark = pytest.mark.unit

CLUSTER = Cluster(1, 8)


def test_stock_run_ran_on_the_whole_cluster(tmp_path):
    run = read_run(run_file(tmp_path / "stock.jsonl", SUBLINEAR, n=8), CLUSTER)
    assert (run.actor_gpus, run.critic_gpus, run.colocated, run.split_metrics) == (8, 8, True, False)
    assert run.steps == (2, 3, 4, 5) and run.first_step == 1  # step 1 left out, validation (step 0) skipped
    assert run.lanes["gen"].mean == pytest.approx(8 + 16 / 8)
    assert run.lanes["actor_prep"].mean == pytest.approx(3 + 8 / 8)  # old_log_prob + ref
    assert run.lanes["gen"].low == pytest.approx(10 * 0.98) and run.lanes["gen"].high == pytest.approx(10 * 1.02)
    assert run.lanes["gen"].std > 0
    assert run.fixed.mean == pytest.approx(1.0)


def test_split_run_uses_verl_splits_lane_times(tmp_path):
    run = read_run(run_file(tmp_path / "split.jsonl", SUBLINEAR, actor_n=6, critic_n=2), CLUSTER)
    assert (run.actor_gpus, run.critic_gpus, run.colocated) == (6, 2, False)
    # verl's timing_s/update_actor (0.002 s) and timing_s/values (0.001 s) are waits: not used.
    assert run.lanes["actor_update"].mean == pytest.approx(5 + 16 / 6)
    assert run.lanes["critic_prep"].mean == pytest.approx(3 + 8 / 2)
    assert run.fixed.mean == pytest.approx(1.0)
    assert run.gpus_of("critic_update") == 2 and run.gpus_of("gen") == 6


def test_a_verl_split_run_on_one_shared_pool_is_colocated(tmp_path):
    data = {**stock_step(SUBLINEAR, 8), "split/actor_pool_gpus": 8.0, "split/critic_pool_gpus": 8.0}
    run = read_run(write_run(tmp_path / "all.jsonl", [data, data]), CLUSTER)
    assert (run.actor_gpus, run.colocated, run.split_metrics) == (8, True, True)
    assert "(stock)" not in run.layout


def test_flat_lines_and_records_of_one_step_are_merged(tmp_path):
    lines = [
        {"step": 1, "timing_s/gen": 5.0, "timing_s/step": 9.0},
        {"step": 2, "timing_s/gen": 4.0},
        {"step": 2, "timing_s/step": 8.0, "timing_s/update_actor": 2.0},
    ]
    path = tmp_path / "flat.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    steps = read_records(path)
    assert steps == [lines[0], {"step": 2, "timing_s/gen": 4.0, "timing_s/step": 8.0, "timing_s/update_actor": 2.0}]
    run = read_run(path, CLUSTER)
    assert run.steps == (2,) and run.lanes["actor_update"].mean == 2.0
    assert run.fixed.mean == pytest.approx(2.0)  # 8 - gen 4 - update 2


def test_a_critic_warm_up_step_has_no_actor_update():
    step = {k: v for k, v in split_step(SUBLINEAR, 4, 4).items() if k != "split/actor_update_s"}
    assert "actor_update" not in lane_times(step)
    assert lane_times(step)["critic_update"] == pytest.approx(5 + 16 / 4)


def test_a_run_without_a_critic_has_no_critic_lanes(tmp_path):
    data = {k: v for k, v in stock_step(SUBLINEAR, 8).items() if k not in ("timing_s/values", "timing_s/update_critic")}
    run = read_run(write_run(tmp_path / "grpo.jsonl", [data, data, data]), CLUSTER)
    assert set(run.lanes) == {"gen", "actor_prep", "actor_update"}


def test_a_single_step_is_used_and_said(tmp_path):
    run = read_run(write_run(tmp_path / "one.jsonl", [stock_step(SUBLINEAR, 8)]), CLUSTER)
    assert run.steps == (1,)
    assert any("only step 1" in note for note in run.notes)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("\n\n", "is empty"),
        ("hello\n", "none of the formats advise reads"),
        ('{"step": 1}\nhello\n{"step": 2}\n', "line 2 is not JSON"),
        ("step,gen\n1,2.0\n", "no phase timings"),
        ('{"foo": 1}\n', 'no numeric "step"'),
        ('{"step": 1, "data": [1, 2]}\n', '"data" is not an object'),
        ('{"step": 1, "data": {"actor/loss": 0.1}}\n{"step": 2, "data": {"actor/loss": 0.2}}\n', "no phase timings"),
        ('{"step": 1, "data": {"timing_s/step": 3.0}}\n', "no generation time"),
    ],
)
def test_bad_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(AdviseError, match=message) as caught:
        read_run(path, CLUSTER)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file(tmp_path):
    with pytest.raises(AdviseError, match="no such file.*file logger"):
        read_run(tmp_path / "nope.jsonl", CLUSTER)


def test_a_cluster_that_cannot_hold_the_run(tmp_path):
    path = run_file(tmp_path / "split.jsonl", SUBLINEAR, actor_n=4, critic_n=4)
    with pytest.raises(
        AdviseError, match=r"4 actor-pool GPUs and 4 critic-pool GPUs, two pools, more than the cluster.*--nnodes"
    ):
        read_run(path, Cluster(1, 4))
