"""The demo without verl: the CPU dry run's overrides for each verl family (the e2e tests run them),
``--compare``'s runs, its per-phase table and plot, and the runner's progress (fake subprocesses)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from verl_split import demo, report
from verl_split.assets import TinyAssets
from verl_split.demo import demo_jobs
from verl_split.dry_run import default_trainer, dry_run_overrides, run_environment
from verl_split.runner import MetricsTail, run_logged

ASSETS = TinyAssets(  # only paths: nothing here opens them
    root=Path("/assets"),
    model=Path("/assets/model"),
    critic_model=Path("/assets/critic_model"),
    train_file=Path("/assets/train.parquet"),
    val_file=Path("/assets/val.parquet"),
    reward_file=Path("/assets/reward.py"),
)


def overrides(family: str, algo: str = "gae", trainer: str | None = None) -> list[str]:
    return dry_run_overrides(ASSETS, 2, algo, trainer, "/out", n_gpus_per_node=2, family=family)


def keys(lines: list[str]) -> set[str]:
    return {line.split("=", 1)[0].lstrip("+") for line in lines}


@pytest.mark.unit
def test_each_family_gets_its_own_default_trainer():
    assert [default_trainer(f) for f in ("0.7", "0.8", "0.9")] == ["v0", "v0", "v1"]
    assert "trainer.use_v1=true" in overrides("0.9")
    assert "trainer.use_v1=false" in overrides("0.9", trainer="v0")


@pytest.mark.unit
@pytest.mark.parametrize("family", ["0.7", "0.8"])
def test_no_v1_trainer_before_0_9(family):
    assert "trainer.use_v1" not in keys(overrides(family))
    with pytest.raises(ValueError, match=rf"verl {family}\.x has no v1 trainer .*use trainer 'v0'"):
        overrides(family, trainer="v1")


@pytest.mark.unit
def test_0_9_keeps_the_platform_and_needs_no_ray_cpu_resource():
    assert "ray_kwargs.ray_init.resources" not in keys(overrides("0.9"))


@pytest.mark.unit
@pytest.mark.parametrize("family", ["0.7", "0.8"])
def test_before_0_9_ray_announces_a_cpu_resource_per_logical_gpu(family):
    lines = overrides(family)
    assert "+ray_kwargs.ray_init.resources={cpu:8}" in lines
    assert "+ray_kwargs.ray_init.num_gpus=8" in lines


@pytest.mark.unit
def test_0_7_moves_the_critic_fsdp_block_and_names_the_layer_to_wrap():
    lines, k = overrides("0.7"), keys(overrides("0.7"))
    assert not any(key.startswith(("critic.fsdp.", "transfer_queue.")) for key in k)
    assert "critic.model.fsdp_config.strategy=fsdp2" in lines
    for block in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model"):
        assert f"{block}.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap" in k
    assert "actor_rollout_ref.actor.fsdp_config.dtype=float32" in lines
    # GRPO has no critic: nothing is written for one.
    assert not any(key.startswith("critic.") for key in keys(overrides("0.7", algo="grpo")))


@pytest.mark.unit
def test_0_8_and_0_9_keep_the_engine_critic_block():
    for family in ("0.8", "0.9"):
        assert "critic.fsdp.strategy=fsdp2" in overrides(family)


# --------------------------------------------------------------------------- --compare: runs, report, progress


def step(n: int, gen: float, prep: float, updates: float, other: float, split: bool) -> dict:
    """One step's metrics as verl (and, for a split run, verl-split) logs them; reward and adv ~ empty."""
    metrics = {
        "step": n,
        "timing_s/gen": gen,
        "timing_s/reward": 1e-5,  # verl times the empty block when there is no reward model
        "timing_s/old_log_prob": prep / 2,
        "timing_s/values": prep / 2,
        "timing_s/adv": 0.002,
        "timing_s/update_critic": updates / 2,
        "timing_s/update_actor": updates / 2,
        "timing_s/step": gen + 1e-5 + prep + 0.002 + updates + other,
    }
    if split:  # the trainer's timers measure its waits; the phases' wall times come from split/*
        metrics.update(
            {
                "timing_s/values": 0.001,
                "timing_s/update_actor": 0.001,
                "split/prep_wall_s": prep,
                "split/update_wall_s": updates,
                "split/critic_update_s": updates,
                "split/actor_update_s": updates,
            }
        )
    return metrics


COLUMNS = [
    (
        "stock",
        [step(1, 9.0, 4.0, 4.0, 1.0, False), step(2, 1.0, 4.0, 4.0, 1.0, False), step(3, 1.0, 4.0, 4.0, 1.0, False)],
    ),
    (
        "split, overlaps off",
        [step(1, 9.0, 4.0, 4.0, 1.0, True), step(2, 1.0, 4.0, 4.0, 1.0, True), step(3, 1.0, 4.0, 4.0, 3.0, True)],
    ),
    (
        "split, overlaps on",
        [step(1, 9.0, 2.0, 2.0, 1.0, True), step(2, 1.0, 2.0, 2.0, 1.0, True), step(3, 1.0, 2.0, 2.0, 1.0, True)],
    ),
]


@pytest.mark.unit
def test_mean_phases_leaves_out_the_first_step_unless_it_is_the_only_one():
    means = report.mean_phases(COLUMNS[1][1])
    assert means["gen"] == pytest.approx(1.0)
    assert means["other"] == pytest.approx(2.0)  # (1 + 3) / 2
    assert means["step"] == pytest.approx(1.0 + 1e-5 + 4.0 + 0.002 + 4.0 + 2.0)
    assert report.mean_phases(COLUMNS[0][1][:1])["gen"] == pytest.approx(9.0)
    assert report.mean_phases([]) is None


@pytest.mark.unit
def test_phase_table_shows_the_three_runs_side_by_side():
    lines = report.phase_table(COLUMNS).splitlines()
    assert lines[0].startswith("wall time per phase, mean of steps 2-3")
    assert [c.strip() for c in lines[1].split("|")] == ["phase", "stock", "split, overlaps off", "split, overlaps on"]
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]] for line in lines if "|" in line}
    assert "reward" not in rows  # ~0 in every run: a phase this job does not have
    assert rows["prep"] == ["4.00s", "4.00s", "2.00s"]
    assert rows["updates"] == ["4.00s", "4.00s", "2.00s"]
    assert rows["adv"] == ["0.00s", "0.00s", "0.00s"]
    assert rows["other"] == ["1.00s", "2.00s", "1.00s"]
    assert rows["step"] == ["10.00s", "11.00s", "6.00s"]
    table_rows = [line.split("|")[0].strip() for line in lines if "|" in line]
    assert table_rows == ["phase", "gen", "prep", "adv", "updates", "other", "step"]  # the whole step last
    speedup = next(line for line in lines if line.startswith("speed-up"))
    assert (
        speedup
        == "speed-up of the whole step, split, overlaps on: 1.67x against stock, 1.83x against split, overlaps off"
    )


@pytest.mark.unit
def test_phase_table_of_one_single_step_run():
    table = report.phase_table([("split", COLUMNS[2][1][:1])])
    assert "step 1, the only one" in table
    assert "speed-up" not in table
    assert table.splitlines()[-3].split("|")[1].strip() == "14.00s"  # the whole step, step 1 included


@pytest.mark.unit
def test_plot_step_times_writes_a_png(tmp_path):
    path = tmp_path / "step_times.png"
    report.plot_step_times(COLUMNS, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


@pytest.mark.unit
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


@pytest.mark.unit
def test_metrics_tail_reads_only_complete_new_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read_new() == []  # not there yet
    record = json.dumps({"step": 1, "data": {"timing_s/step": 2.5}})
    path.write_text(record + "\n" + record[:10])  # the second line half written
    assert tail.read_new() == [{"step": 1, "timing_s/step": 2.5}]
    with open(path, "a") as f:
        f.write(record[10:].replace('"step": 1', '"step": 2') + "\nnot json\n")
    assert [s["step"] for s in tail.read_new()] == [1]  # the completed line; the unreadable one skipped
    assert tail.read_new() == []


def fake_main_ppo(script: str) -> list[str]:
    """A stand-in for main_ppo: prints, appends steps to VERL_FILE_LOGGER_PATH as verl's file logger does."""
    return [sys.executable, "-c", textwrap.dedent(script)]


STEPPING = """
    import json, os, sys, time
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "wb", buffering=0) as f:
        for n in (1, 2, 3):
            print("verl says a lot", n, flush=True)
            f.write(json.dumps({"step": n, "data": {"timing_s/step": n / 10}}).encode() + b"\\n")
            time.sleep(0.3)
    sys.exit(int(os.environ.get("EXIT", "0")))
"""


def test_run_logged_reports_each_step_and_logs_the_output(tmp_path):
    seen = []
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(tmp_path / "metrics.jsonl")}
    finished = run_logged(
        fake_main_ppo(STEPPING),
        env,
        tmp_path,
        tmp_path / "main_ppo.log",
        tmp_path / "metrics.jsonl",
        seen.append,
        poll_s=0.1,
    )
    assert finished.returncode == 0 and not finished.timed_out
    assert [(s["step"], s["timing_s/step"]) for s in seen] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert (tmp_path / "main_ppo.log").read_text().count("verl says a lot") == 3


def test_run_logged_kills_the_run_after_its_timeout(tmp_path):
    sleeper = fake_main_ppo("import time; time.sleep(60)")
    finished = run_logged(sleeper, dict(os.environ), tmp_path, tmp_path / "log", tmp_path / "m.jsonl", timeout=0.5)
    assert finished.timed_out and finished.returncode == -9 and finished.wall_s < 10


def test_a_failed_run_shows_the_end_of_its_log_and_exits_with_verls_status(tmp_path, monkeypatch, capsys):
    failing = "for n in range(100): print('line', n)\nraise SystemExit(3)"
    monkeypatch.setattr(demo, "main_ppo_command", lambda overrides: fake_main_ppo(failing))
    job = demo.Job("stock", tmp_path, dict(os.environ), "stock verl")
    assert demo._run_job(job, [], "[1/3]", 3) == 3
    out, err = capsys.readouterr()
    assert out.strip() == f"[1/3] stock verl: starting main_ppo, its output in {tmp_path / 'main_ppo.log'}"
    assert "line 59\n" not in err and "line 60\nline 61" in err and "line 99\n" in err  # the last 40 lines
    assert f"verl exited with status 3; its whole output: {tmp_path / 'main_ppo.log'}" in err


def test_the_update_table_shows_a_deferred_critic_update():
    """A step whose critic update ran on into the next: its wall is what the step waited for, plus what hid."""
    deferred = {
        "step": 1,
        "split/critic_update_s": 3.0,
        "split/actor_update_s": 1.0,
        "split/update_wall_s": 3.0,
        "split/critic_update_deferred": 1.0,
        "split/critic_update_hidden_s": 1.5,
        "split/critic_join_wait_s": 0.5,
        "timing_s/update_critic": 0.01,
        "timing_s/update_actor": 1.0,
    }
    rows = report.step_rows([deferred])
    assert rows[0]["wall_s"] == pytest.approx(1.01) and rows[0]["speedup"] == pytest.approx(4.0 / 1.01)
    table = report.summary_table(rows)
    assert "hidden" in table and "1.50s" in table and "0.50s" in table
