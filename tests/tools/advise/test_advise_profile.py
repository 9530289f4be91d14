"""``verl-split advise --profile`` without running anything: the arguments, the checks before any run, the
runs' environments and overrides, progress, and a failed run (``runner.run_logged`` replaced by a fake)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from support.advise_profiles import SUBLINEAR, run_file

from verl_split.dryrun import runner
from verl_split.placement import Cluster
from verl_split.tools.advise import profile
from verl_split.tools.cli import build_parser, main

pytestmark = pytest.mark.unit

CLUSTER = ["--nnodes", "1", "--n-gpus-per-node", "2"]
#: verl's ppo_trainer defaults to rollout tensor parallel 2, which a 1-GPU pool of halves cannot hold.
JOB = ["actor_rollout_ref.rollout.tensor_model_parallel_size=1", "+actor_rollout_ref.model.override_config.x=1"]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in [*profile.settings.VARIABLES, "RAY_ADDRESS"]:
        monkeypatch.delenv(name, raising=False)
    # Two GPUs on this machine as far as the profile can tell (no torch.cuda query in a unit test).
    monkeypatch.setattr(profile, "cuda_device_count", lambda: 2)


def parse(*argv: str) -> argparse.Namespace:
    argv_list = ["advise", "--verbose", *argv]
    return build_parser(argv_list).parse_args(argv_list)


def advise(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["advise", "--verbose", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_overrides_after_the_double_dash_are_the_jobs():
    args = parse("--profile", *CLUSTER, "--steps", "4", "--out", "o", "--", *JOB, "~trainer.foo")
    assert args.profile and args.runs == [*JOB, "~trainer.foo"]
    assert (args.steps, args.out, args.cpu, args.nnodes, args.n_gpus_per_node) == (4, "o", False, 1, 2)
    assert parse("--profile", "--cpu", *CLUSTER).runs == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "3", "run.jsonl"], "--steps only with --profile"),
        (["--cpu", "run.jsonl"], "--cpu only with --profile"),
        ([], "no run given"),
        (["--profile", "--steps", "1", "--", *JOB], "--steps 1: at least 2"),
        (["--profile", "--", "stock.jsonl"], "--profile runs the job itself"),
        (["--profile", "--", "--fast"], "is not a hydra override"),
        (["--profile", "--", "+split_placement.placement=6:2"], "Leave split_placement out"),
        (["--profile", "--", "trainer.n_gpus_per_node=8"], "trainer.n_gpus_per_node=8 but --n-gpus-per-node is 2"),
        (["--profile", "--", "--config-name"], "--config-name needs a value"),
        (["--profile", "--cpu", "--nnodes", "2", "--n-gpus-per-node", "2"], "use --nnodes 1"),
        (["--profile", "--rollout-tp", "2", "--", *JOB], "--rollout-tp 2, but the job's rollout replica is 1"),
        (["--profile", "--", "data.no_such_key=1"], "does not compose"),
    ],
)
def test_bad_profile_arguments_are_one_line_and_exit_2_before_any_run(capsys, monkeypatch, args, message):
    started = []
    monkeypatch.setattr(runner, "run_logged", lambda *a, **k: started.append(a))
    if "--nnodes" not in args:
        args = [*args[:1], *CLUSTER, *args[1:]] if args and args[0] == "--profile" else [*args, *CLUSTER]
    code, out, err = advise(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith("verl-split advise: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not started


def test_a_cluster_too_small_for_the_split_run(capsys):
    code, _, err = advise(capsys, "--profile", "--nnodes", "1", "--n-gpus-per-node", "1", "--", *JOB)
    assert code == 2 and "cannot hold the split run (halves)" in err and "only 1 GPU" in err
    code, _, err = advise(capsys, "--profile", *CLUSTER)  # verl's default rollout: tensor parallel 2
    assert code == 2 and "not divisible by actor_rollout_ref.rollout.tensor_model_parallel_size" in err


def test_a_machine_without_the_gpus_is_told_about_cpu_mode(capsys, monkeypatch):
    monkeypatch.setattr(profile, "cuda_device_count", lambda: 0)
    code, _, err = advise(capsys, "--profile", *CLUSTER, "--", *JOB)
    assert code == 2 and "this machine has 0 GPUs, the runs need 2" in err and "--cpu" in err
    monkeypatch.setenv("VERL_SPLIT_CPU", "1")  # the user's own job on CPU: no GPU count
    prepared = profile.prepare(JOB, Cluster(1, 2), out="o")
    assert prepared.runs[0].env["VERL_SPLIT_CPU"] == "1"


def test_an_unknown_verl_split_variable_stops_before_any_run(capsys, monkeypatch):
    monkeypatch.setenv("VERL_SPLIT_OVERLAPP", "off")
    code, _, err = advise(capsys, "--profile", *CLUSTER, "--", *JOB)
    assert code == 2 and "unknown variable VERL_SPLIT_OVERLAPP" in err


def test_the_two_runs_environments_and_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_SPLIT", "1")
    monkeypatch.setenv("VERL_SPLIT_PLACEMENT", "6:2")
    monkeypatch.setenv("VERL_SPLIT_TRACE", "t.json")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    prepared = profile.prepare(["--config-name", "ppo_trainer", *JOB], Cluster(1, 2), steps=4, out=tmp_path)
    stock, split = prepared.runs
    assert (stock.folder, split.folder) == (tmp_path / "stock", tmp_path / "halves_overlap_off")
    assert not [k for k in stock.env if k.startswith("VERL_SPLIT")] and stock.env["SOMETHING_ELSE"] == "kept"
    assert {k: v for k, v in split.env.items() if k.startswith("VERL_SPLIT")} == {
        "VERL_SPLIT": "1",
        "VERL_SPLIT_PLACEMENT": "halves",
        "VERL_SPLIT_OVERLAP": "off",
    }
    overrides = prepared.run_overrides(split)
    assert overrides[:2] == ["--config-name", "ppo_trainer"] and overrides[2:4] == JOB
    forced = overrides[4:]
    assert "trainer.total_training_steps=4" in forced and "trainer.logger=[console,file]" in forced
    assert "trainer.resume_mode=disable" in forced  # never resumes from, or writes to, the job's checkpoints
    assert forced[-1] == f"trainer.default_local_dir={split.folder / 'checkpoints'}"
    assert (prepared.critic, prepared.rollout_tp) == (True, 1)


def test_a_job_without_a_critic_runs_stock_only(tmp_path):
    prepared = profile.prepare(["algorithm.adv_estimator=grpo"], Cluster(1, 2), out=tmp_path)
    assert [run.label for run in prepared.runs] == ["stock verl"]


def _fake_runs(tmp_path: Path, fail: str | None = None):
    """A run_logged that writes a synthetic run's metrics (or fails) instead of starting main_ppo."""
    calls = []

    def run_logged(command, env, cwd, log_path, metrics_path, on_step=None, **_):
        calls.append((command, env))
        cwd.mkdir(parents=True, exist_ok=True)
        log_path.write_text("".join(f"verl line {i}\n" for i in range(100)))
        if cwd.name == fail:
            return runner.Finished(3, 1.0, log_path)
        split = env.get("VERL_SPLIT") == "1"
        run_file(metrics_path, SUBLINEAR, steps=3, **({"actor_n": 1, "critic_n": 1} if split else {"n": 2}))
        for step in runner.read_metrics(metrics_path):
            on_step(step)
        return runner.Finished(0, 2.0, log_path)

    return run_logged, calls


def test_profile_runs_both_layouts_with_progress_then_advises(tmp_path, capsys, monkeypatch):
    fake, calls = _fake_runs(tmp_path)
    monkeypatch.setattr(runner, "run_logged", fake)
    code, out, err = advise(capsys, "--profile", *CLUSTER, "--out", str(tmp_path), "--", *JOB)
    assert code == 0, err
    assert [env.get("VERL_SPLIT_OVERLAP") for _, env in calls] == [None, "off"]
    assert calls[0][1]["VERL_FILE_LOGGER_PATH"] == str(tmp_path / "stock" / "metrics.jsonl")
    assert calls[0][0][1:3] == ["-m", "verl.trainer.main_ppo"]
    lines = out.splitlines()
    assert lines[0].startswith("verl-split advise --profile: 3 steps of the job per layout")
    assert f"[1/2] stock verl: starting main_ppo, its output in {tmp_path / 'stock' / 'main_ppo.log'}" in lines
    assert "[2/2] halves, overlaps off: step 3/3 done" not in lines  # the step time is shown
    assert any(line.startswith("[2/2] halves, overlaps off: step 3/3 ") for line in lines)
    assert "[2/2] halves, overlaps off: finished in 2s" in lines
    assert "fitted to 1, 2 GPUs" in out and "recommended: split_placement.placement=" in out
    assert f"advise again from these runs: verl-split advise {tmp_path / 'stock' / 'metrics.jsonl'} " in out


def test_profile_json_keeps_stdout_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "run_logged", _fake_runs(tmp_path)[0])
    code, out, err = advise(capsys, "--profile", "--json", *CLUSTER, "--out", str(tmp_path), "--", *JOB)
    assert code == 0
    result = json.loads(out)
    assert [run["layout"] for run in result["runs"]] == ["colocated", "split"]
    assert "[1/2] stock verl: step 1/3" in err


def test_a_failed_run_prints_the_end_of_its_log_and_exits_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "run_logged", _fake_runs(tmp_path, fail="halves_overlap_off")[0])
    code, out, err = advise(capsys, "--profile", *CLUSTER, "--out", str(tmp_path), "--", *JOB)
    assert code == 1
    assert "[1/2] stock verl: finished" in out and "recommended" not in out
    assert "verl line 99" in err and "verl line 59" not in err  # the last 40 lines
    log = tmp_path / "halves_overlap_off" / "main_ppo.log"
    assert err.splitlines()[-1] == (
        f"verl-split advise: halves, overlaps off: verl exited with status 3; its whole output: {log}"
    )


def test_ctrl_c_during_a_run_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_logged", interrupted)
    code, _, err = advise(capsys, "--profile", *CLUSTER, "--out", str(tmp_path), "--", *JOB)
    assert code == 130 and err == f"verl-split advise: interrupted; the runs so far are in {tmp_path}\n"
