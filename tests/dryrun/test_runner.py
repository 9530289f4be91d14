"""The main_ppo runner (verl_split/dryrun/runner.py) and the demo's handling of a failed run, with
stand-ins for main_ppo: fake subprocesses that print and append steps as verl's file logger does."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from verl_split.dryrun.runner import MetricsTail, run_logged
from verl_split.tools import demo

pytestmark = pytest.mark.subprocess


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
    assert demo.run_job(job, [], "[1/3]", 3) == 3
    out, err = capsys.readouterr()
    assert out.strip() == f"[1/3] stock verl: starting main_ppo, its output in {tmp_path / 'main_ppo.log'}"
    assert "line 59\n" not in err and "line 60\nline 61" in err and "line 99\n" in err  # the last 40 lines
    assert f"verl exited with status 3; its whole output: {tmp_path / 'main_ppo.log'}" in err


def test_run_logged_removes_the_shared_memory_segments_its_run_left_and_says_so(tmp_path, monkeypatch):
    from verl_split.dryrun import shm

    monkeypatch.setattr(shm, "SHM_DIR", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    (tmp_path / "shm" / "psm_older").write_bytes(b"")  # there before the run: not the run's
    leaves = f"open({str(tmp_path / 'shm' / 'psm_run')!r}, 'w').close()"
    log = tmp_path / "log.txt"
    done = run_logged([sys.executable, "-c", leaves], {}, tmp_path, log, tmp_path / "metrics.jsonl")
    assert done.returncode == 0 and done.shm_removed == ["psm_run"]
    assert sorted(p.name for p in (tmp_path / "shm").iterdir()) == ["psm_older"]
    assert "removed 1 shared-memory segment(s) the run left" in log.read_text()
