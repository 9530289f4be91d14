"""Benchmark: does ``verl-split advise --profile`` predict the step time of a layout it never ran?

On CPU (no GPU used or needed), the tiny dry-run PPO job (``verl_split.dryrun.recipe``: GAE with a critic,
2 logical GPUs, verl's default trainer) per repetition:

1. ``verl-split advise --profile --cpu --nnodes 1 --n-gpus-per-node 2 --steps S --json``: stock verl and
   ``halves`` with the overlaps off, then the ranking (the command as a user runs it, in a subprocess);
2. ``halves`` with the overlaps on (``VERL_SPLIT=1 VERL_SPLIT_PLACEMENT=halves VERL_SPLIT_OVERLAP=updates,prep``),
   for real, same job and steps: the layout the profile did not run, whose prediction composes the two
   overlap-off lanes with ``max``;
3. the recommended layout for real, unless it is halves without the deferral (then 2 is it): ``all`` is stock
   verl run anew, a ``+defer`` row runs with ``VERL_SPLIT_OVERLAP=updates,prep,defer_critic``.

A run's measured step is the mean ``timing_s/step`` over steps 2..S (step 1 pays start-up costs, as advise
leaves it out); error = (predicted - measured) / measured. Goal: |error| <= 15 % for split with overlap.
Generation, the same on every layout, is most of the tiny job's step, so the error of the step without it
is shown too.
Tables show every repetition and min / median / max. Run from the repository root on an idle machine:

    .venv/bin/python benchmarks/advise_check.py --json benchmarks/advise_check.json   # ~6 min on 2 cores

Extra hydra overrides for the tiny job go after ``--`` (they reach the profile and the check runs alike).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from verl_split.dryrun import report
from verl_split.dryrun.assets import make_tiny_assets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, main_ppo_command, read_metrics, run_logged
from verl_split.placement import Cluster
from verl_split.tools.advise.profile import forced_overrides

CLUSTER = Cluster(nnodes=1, n_gpus_per_node=2)
GOAL = 0.15
SPLIT_OVERLAP = "halves, overlaps on"
#: VERL_SPLIT_OVERLAP of a plain split row and of a ``+defer`` row (``on`` includes defer_critic since issue 22).
PLAIN_OVERLAPS = "updates,prep"
DEFER_OVERLAPS = "updates,prep,defer_critic"


def run_profile(assets_root: Path, out: Path, steps: int, extra: list[str]) -> dict[str, Any]:
    """``verl-split advise --profile --cpu --json`` as a user runs it; its progress passes through on stderr."""
    command = [sys.executable, "-m", "verl_split.tools.cli", "advise", "--profile", "--cpu", "--json"]
    command += ["--nnodes", str(CLUSTER.nnodes), "--n-gpus-per-node", str(CLUSTER.n_gpus_per_node)]
    command += ["--steps", str(steps), "--out", str(out), "--assets", str(assets_root), "--", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"advise --profile failed (exit status {proc.returncode}); its runs are in {out}")
    return json.loads(proc.stdout)


def run_layout(
    assets, out: Path, steps: int, extra: list[str], placement: str | None, overlaps: str = PLAIN_OVERLAPS
) -> list[dict[str, Any]]:
    """The same job as the profile's runs in one layout: ``placement`` None is stock verl."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    if placement is not None:
        env.update(VERL_SPLIT="1", VERL_SPLIT_PLACEMENT=placement, VERL_SPLIT_OVERLAP=overlaps)
    overrides = dry_run_overrides(assets, steps, "gae", None, out, CLUSTER.n_gpus_per_node) + extra
    overrides += forced_overrides(CLUSTER, steps) + [f"trainer.default_local_dir={out / 'checkpoints'}"]
    label = "stock verl" if placement is None else f"{placement}, overlaps on"
    print(f"  {label}: running in {out}", file=sys.stderr, flush=True)
    done = run_logged(main_ppo_command(overrides), run_environment(out, env), out, out / LOG_FILE, out / METRICS_FILE)
    if done.returncode != 0:
        sys.exit(f"main_ppo failed ({label}, exit status {done.returncode}); see {out / LOG_FILE}")
    print(f"  {label}: {done.wall_s:.0f} s", file=sys.stderr, flush=True)
    return read_metrics(out / METRICS_FILE)


def candidate(advice: dict[str, Any], placement: str, deferred: bool = False) -> dict[str, Any]:
    """The candidate row of ``placement``, also when it shares a row with another name; its ``+defer`` row
    with ``deferred`` (advise lists one only where the deferral changes the prediction).

    Never a ``+shared`` row (shared rollout): the check runs placements without it. The profile passes no
    push cost, so advise does not rank those rows here anyway.
    """
    rows = [
        c
        for c in advice["candidates"]
        if not c.get("shared_rollout") and (c["placement"] == placement or placement in c["same_prediction_as"])
    ]
    return next((c for c in rows if bool(c.get("deferred_critic")) == deferred), rows[0])


def compare(target: str, cand: dict[str, Any], metrics: list[dict[str, Any]]) -> dict[str, Any]:
    measured = report.mean_phases(metrics)
    predicted = cand["phases_s"]
    return {
        "target": target,
        "placement": cand["placement"],
        "predicted_step_s": cand["predicted_step_s"],
        "measured_step_s": measured["step"],
        "error": cand["predicted_step_s"] / measured["step"] - 1.0,
        # Generation is most of the tiny job's step (verl's v1 trainer polls for it in 2 s steps) and the same
        # on every layout: the error of the rest is the one the layout's own phases make.
        "error_without_gen": (cand["predicted_step_s"] - predicted["gen"]) / (measured["step"] - measured["gen"]) - 1.0,
        "phases_predicted_s": predicted,
        "phases_measured_s": {
            "gen": measured["gen"],
            "prep": measured["prep"],
            "updates": measured["updates"],
            "other": measured["step"] - measured["gen"] - measured["prep"] - measured["updates"],
        },
        "steps": [int(s["step"]) for s in report.steady_steps(metrics)],
    }


def stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def print_tables(rows: list[dict[str, Any]], summary: dict[str, dict[str, Any]]) -> None:
    print("\npredicted vs measured step time (s), mean of steps 2..S; error = predicted / measured - 1")
    head = f"{'rep':>3}  {'target':<22}{'placement':<11}{'predicted':>10}{'measured':>10}{'error':>9}{'w/o gen':>9}"
    head += "   phases (predicted / measured)"
    print(head + "\n" + "-" * len(head))
    for row in rows:
        phases = "  ".join(
            f"{p} {row['phases_predicted_s'][p]:.2f}/{row['phases_measured_s'][p]:.2f}"
            for p in ("gen", "prep", "updates", "other")
        )
        print(
            f"{row['repetition']:>3}  {row['target']:<22}{row['placement']:<11}{row['predicted_step_s']:10.2f}"
            f"{row['measured_step_s']:10.2f}{100 * row['error']:+8.1f}%{100 * row['error_without_gen']:+8.1f}%"
            f"   {phases}"
        )
    print()
    for target, s in summary.items():
        e = s["error"]
        verdict = "within" if s["within_goal"] else "NOT within"
        print(
            f"{target}: error min {100 * e['min']:+.1f} %, median {100 * e['median']:+.1f} %, "
            f"max {100 * e['max']:+.1f} % over {s['repetitions']} repetitions: {verdict} the {100 * GOAL:.0f} % goal"
        )
        g = s["error_without_gen"]
        print(
            f"  the step without generation: error min {100 * g['min']:+.1f} %, median {100 * g['median']:+.1f} %, "
            f"max {100 * g['max']:+.1f} %"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="repetitions (default %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="PPO steps per run; step 1 is not averaged (default 3)")
    parser.add_argument("--work-dir", default=None, help="where runs write (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="write the settings, rows and summary as JSON to this file")
    parser.add_argument("overrides", nargs="*", help="extra hydra overrides for the tiny job (after --)")
    args = parser.parse_args()
    started, load_before = time.monotonic(), os.getloadavg()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="verl_split_advise_check_")).resolve()
    assets = make_tiny_assets(work / "assets")
    rows: list[dict[str, Any]] = []
    recommended: list[str] = []
    for i in range(1, args.repeats + 1):
        rep = work / f"rep{i}"
        print(f"repetition {i}/{args.repeats}: advise --profile in {rep / 'profile'}", file=sys.stderr, flush=True)
        advice = run_profile(assets.root, rep / "profile", args.steps, args.overrides)
        best = advice["recommended"]["placement"]
        deferred = bool(advice["recommended"].get("deferred_critic"))
        recommended.append(best + (" +defer" if deferred else ""))
        halves = candidate(advice, "halves")
        overlap_metrics = run_layout(assets, rep / "halves_overlap_on", args.steps, args.overrides, "halves")
        rows.append({"repetition": i, **compare(SPLIT_OVERLAP, halves, overlap_metrics)})
        best_cand = candidate(advice, best, deferred)
        if best_cand is halves:
            best_metrics = overlap_metrics
        else:
            placement = None if best_cand["layout"] == "colocated" else best
            overlaps = DEFER_OVERLAPS if best_cand.get("deferred_critic") else PLAIN_OVERLAPS
            best_metrics = run_layout(assets, rep / "recommended", args.steps, args.overrides, placement, overlaps)
        rows.append({"repetition": i, **compare(f"recommended ({recommended[-1]})", best_cand, best_metrics)})
        rows[-1]["advice"] = advice
    summary = {}
    for target in dict.fromkeys(row["target"] for row in rows):
        errors = [row["error"] for row in rows if row["target"] == target]
        summary[target] = {
            "repetitions": len(errors),
            "error": stats(errors),
            "abs_error": stats([abs(e) for e in errors]),
            "error_without_gen": stats([row["error_without_gen"] for row in rows if row["target"] == target]),
            "within_goal": max(abs(e) for e in errors) <= GOAL,
        }
    print_tables(rows, summary)
    minutes = (time.monotonic() - started) / 60
    print(
        f"\n{args.repeats} repetitions in {minutes:.1f} min; recommended: {', '.join(recommended)}; load average "
        f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs; work in {work}"
    )
    if args.json:
        settings = {
            "kind": "settings",
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU used",
            "minutes": minutes,
            "load_average_before": load_before[0],
            "load_average_after": os.getloadavg()[0],
            "repeats": args.repeats,
            "steps": args.steps,
            "overrides": args.overrides,
            "cluster": {"nnodes": CLUSTER.nnodes, "n_gpus_per_node": CLUSTER.n_gpus_per_node},
            "goal_abs_error": GOAL,
        }
        out = [settings, *({"kind": "comparison", **row} for row in rows)]
        out += [{"kind": "summary", "target": target, **s} for target, s in summary.items()]
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
