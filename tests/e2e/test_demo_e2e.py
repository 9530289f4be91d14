"""``verl-split demo --compare`` as ``make demo`` runs it: three real main_ppo runs on CPU, a short console.

The same job as stock verl, split with overlaps off and split with overlaps on; what it prints (progress,
the per-phase table, the update table) and what it leaves in OUT (three metrics files, three logs, two plots);
then ``verl-split advise`` on two of those real runs, as the README shows it, from verl's file logger and from
the console output in each run's ``main_ppo.log`` (the same lanes, within 1 %).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.ppo_run import PPORun
from test_cpu_dry_run import check_ppo_run

from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, read_metrics
from verl_split.placement import Cluster
from verl_split.tools.advise.logs import CONSOLE
from verl_split.tools.advise.runs import read_run
from verl_split.tools.demo import DEMO_CRITIC_EPOCHS

pytestmark = pytest.mark.e2e

STEPS = 2
TIMEOUT_S = 1200  # three runs of about a minute each on 2 busy cores


@pytest.fixture(scope="module")
def demo(tiny_assets, tmp_path_factory):
    """``VERL_SPLIT=1 verl-split demo --compare``, once for the module: (OUT, the finished process)."""
    out = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    env["VERL_SPLIT"] = "1"  # as `make demo` sets it
    command = [sys.executable, "-m", "verl_split.tools.cli", "demo", "--compare", "--steps", str(STEPS)]
    command += ["--out", str(out), "--assets", str(tiny_assets.root)]
    return out, subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def test_demo_compare_runs_three_ways_and_keeps_the_console_short(demo):
    out, proc = demo
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-6000:]

    for folder in (out / "stock", out / "sequential", out):
        assert [m["step"] for m in read_metrics(folder / METRICS_FILE)] == list(range(1, STEPS + 1)), folder
        assert (folder / "main_ppo.log").stat().st_size > 10_000, "verl's output belongs in the run's log"
    assert not any(key.startswith("split/") for m in read_metrics(out / "stock" / METRICS_FILE) for key in m)
    assert {m["split/overlapped"] for m in read_metrics(out / "sequential" / METRICS_FILE)} == {0.0}
    main_run = read_metrics(out / METRICS_FILE)
    assert {m["split/overlapped"] for m in main_run} == {1.0}
    # The demo's critic trains DEMO_CRITIC_EPOCHS epochs: its update outlasts the actor's and, deferred, a part
    # of it runs behind the next step (the last step never defers).
    assert main_run[0]["split/critic_update_deferred"] == 1.0 and main_run[0]["split/critic_update_hidden_s"] > 0
    for plot in ("step_times.png", "update_times.png"):
        assert (out / plot).stat().st_size > 10_000, plot

    lines = console.splitlines()
    header = ["phase", "stock", "split, overlaps off", "split, overlaps on"]
    assert any([cell.strip() for cell in line.split("|")] == header for line in lines), console
    assert any(line.startswith("speed-up of the whole step, split, overlaps on: ") for line in lines)
    assert any(line.startswith(f"the job: the critic trains {DEMO_CRITIC_EPOCHS} epochs a step") for line in lines)
    assert any(line.startswith("the critic's update deferred in step 1: of its ") for line in lines), console
    assert "step 1's start-up clipped to the later steps' scale" in console
    # issue 54: it ends on what to conclude (the overlaps happened; the CPU figure is no GPU one) and what to run next.
    assert any(line.startswith("conclusion: the overlaps happened") for line in lines), console[-3000:]
    assert proc.stdout.rstrip().splitlines()[-2].startswith("  verl-split advise <your run's log>"), console[-3000:]
    for tag in ("[1/3] stock verl", "[2/3] split placement, overlaps off", "[3/3] split placement, overlaps on"):
        assert f"{tag}: step {STEPS}/{STEPS} " in console, tag
    assert "ray init kwargs" not in console  # verl's own output stays in the logs
    assert len(lines) < 100, console


def test_the_demos_stock_run_is_a_sound_ppo_run(demo):
    """The stock run is the CPU dry run's GAE job on verl's default trainer, its critic trained
    DEMO_CRITIC_EPOCHS epochs a step: the dry run's own checks hold (on 0.9 this stands in for that job's
    e2e check; test_cpu_dry_run.py runs the job itself on the other families)."""
    out, proc = demo
    assert proc.returncode == 0, proc.stdout[-6000:]
    stock = out / "stock"
    metrics = read_metrics(stock / METRICS_FILE)
    run = PPORun(0, 0.0, 0, 0, metrics, (stock / LOG_FILE).read_text(errors="replace"))
    check_ppo_run(run, STEPS)
    for key in ("critic/vf_loss", "critic/grad_norm", "critic/values/mean"):
        run.assert_finite(key)


def test_advise_reads_the_demos_real_runs(demo):
    """advise from real verl metrics: stock and split with the overlaps off, the two runs --profile makes
    (the --profile run itself: test_advise_e2e.py, extended). The demo's runs: no training of its own."""
    out, proc = demo
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    command = [sys.executable, "-m", "verl_split.tools.cli", "advise", str(out / "stock" / METRICS_FILE)]
    command += [str(out / "sequential" / METRICS_FILE), "--nnodes", "1", "--n-gpus-per-node", "2", "--json"]
    advised = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert advised.returncode == 0, advised.stderr
    advice = json.loads(advised.stdout)
    assert {c["placement"] for c in advice["candidates"]} >= {"all", "halves"}
    assert advice["recommended"]


def test_advise_reads_the_demos_console_output_as_its_metrics(demo):
    """issue 24: advise on each run's main_ppo.log, verl's console as the demo saved it (Ray's coloured
    prefixes, every process's output), gives the lanes, the layout and the prediction of its metrics.jsonl."""
    out, proc = demo
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    cluster = Cluster(1, 2)
    for folder in (out / "stock", out / "sequential", out):
        from_log, from_jsonl = read_run(folder / LOG_FILE, cluster), read_run(folder / METRICS_FILE, cluster)
        assert from_log.format == CONSOLE and from_log.cluster == cluster  # the config verl printed at start-up
        assert (from_log.actor_gpus, from_log.critic_gpus, from_log.colocated) == (
            from_jsonl.actor_gpus,
            from_jsonl.critic_gpus,
            from_jsonl.colocated,
        )
        assert from_log.steps == from_jsonl.steps and set(from_log.lanes) == set(from_jsonl.lanes), folder
        for lane, spread in from_jsonl.lanes.items():
            assert from_log.lanes[lane].mean == pytest.approx(spread.mean, rel=0.01), (folder, lane)
        assert from_log.fixed.mean == pytest.approx(from_jsonl.fixed.mean, rel=0.01, abs=1e-3)

    def advised(name: str) -> dict:
        command = [sys.executable, "-m", "verl_split.tools.cli", "advise", str(out / "stock" / name)]
        command += [str(out / "sequential" / name), "--nnodes", "1", "--n-gpus-per-node", "2", "--json"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    logs, metrics = advised(LOG_FILE), advised(METRICS_FILE)

    def predicted(advice: dict) -> dict[str, float]:
        return {f"{c['placement']} {c['deferred_critic']}": c["predicted_step_s"] for c in advice["candidates"]}

    assert predicted(logs) == pytest.approx(predicted(metrics), rel=0.01)
    assert logs["recommended"]["placement"] == metrics["recommended"]["placement"]
