"""The layout a run trained on, for ``verl-split advise`` (issue 24): from the log when it says (verl's config
printed at start-up, verl-split's ``split/*`` pool sizes), else from the flags; its source said; a clash an error
naming both sides. Console logs written by ``verl_console`` from verl's logger code; synthetic numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.advise_profiles import SUBLINEAR, split_step, stock_step, write_run
from support.verl_console import config, console_log

from verl_split.placement import Cluster
from verl_split.tools.advise import advise
from verl_split.tools.advise.layout import CONFIG, FLAGS, METRICS
from verl_split.tools.advise.runs import AdviseError, read_run

pytestmark = pytest.mark.unit


def log(path: Path, steps, cfg) -> Path:
    path.write_text(console_log("0.9", steps, cfg))
    return path


def test_the_config_and_the_metrics_agree(tmp_path):
    steps = [split_step(SUBLINEAR, 4, 4)] * 3
    run = read_run(log(tmp_path / "split.log", steps, config(1, 8, {"placement": "halves"})), Cluster(1, 8))
    assert (run.actor_gpus, run.critic_gpus, run.colocated) == (4, 4, False)
    assert run.layout_source.startswith(METRICS) and "as the config's split_placement plans it" in run.layout_source


def test_a_config_the_metrics_contradict_names_both(tmp_path):
    steps = [split_step(SUBLINEAR, 4, 4)] * 3
    path = log(tmp_path / "split.log", steps, config(1, 8, {"placement": "6:2"}))
    with pytest.raises(AdviseError) as caught:
        read_run(path, Cluster(1, 8))
    message = str(caught.value)
    assert "places the run as 6 actor + 2 critic GPUs" in message and "trained on 4 actor + 4 critic GPUs" in message
    assert "\n" not in message


def test_pools_larger_than_the_logged_cluster(tmp_path):
    steps = [split_step(SUBLINEAR, 6, 6)] * 3
    with pytest.raises(AdviseError, match=r"6 actor-pool GPUs and 6 critic-pool GPUs.*the config printed at start"):
        read_run(log(tmp_path / "split.log", steps, config(1, 8)), Cluster(2, 8))


def test_a_run_on_another_cluster_is_fitted_at_its_own_pool_size(tmp_path):
    stock = read_run(log(tmp_path / "stock.log", [stock_step(SUBLINEAR, 16)] * 3, config(2, 8)), Cluster(1, 8))
    assert (stock.actor_gpus, stock.cluster, stock.colocated) == (16, Cluster(2, 8), True)
    assert any("trained on GPUs 0-15 on 2 nodes of 8" in note and "advising for" in note for note in stock.notes)
    split = write_run(tmp_path / "split.jsonl", [split_step(SUBLINEAR, 4, 4)] * 3)
    advice = advise([tmp_path / "stock.log", split], Cluster(1, 8))
    assert advice.model.lanes["gen"].sizes == (4, 16)
    assert advice.model.lanes["gen"].serial_s == pytest.approx(SUBLINEAR["gen"][0], rel=1e-6)


def test_a_split_placement_block_without_verl_split_metrics_ran_stock(tmp_path):
    steps = [stock_step(SUBLINEAR, 8)] * 3
    run = read_run(log(tmp_path / "stock.log", steps, config(1, 8, {"placement": "halves"})), Cluster(1, 8))
    assert run.colocated and run.actor_gpus == 8 and CONFIG in run.layout_source
    assert any("verl-split was off" in note for note in run.notes)


def test_without_a_config_the_flags_give_the_stock_pool(tmp_path):
    run = read_run(write_run(tmp_path / "stock.jsonl", [stock_step(SUBLINEAR, 8)] * 3), Cluster(1, 8))
    assert run.actor_gpus == 8 and run.layout_source.endswith(FLAGS) and run.cluster == Cluster(1, 8)


def test_a_config_cut_by_other_output_falls_back_to_the_flags(tmp_path):
    text = console_log("0.9", [stock_step(SUBLINEAR, 8)] * 3, config(1, 2))
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "{'actor_rollout_ref'" in line)
    lines[first + 3] = lines[first + 3][:30]  # the printing process was cut off mid-line
    path = tmp_path / "cut.log"
    path.write_text("\n".join(lines))
    run = read_run(path, Cluster(1, 8))
    assert run.actor_gpus == 8 and run.layout_source.endswith(FLAGS)
    assert any("could not be read" in note for note in run.notes)
