"""Benchmark: what the CPU dry run costs a laptop, in wall time and memory.

The budgets once asserted inside the dry-run tests (under 5 minutes, under 8 GiB) are performance
figures, not correctness: on a loaded 2-core CI they could fail a correct build. They live here.

Per repetition, the tiny dry-run PPO job (``verl_split.dryrun.recipe``: GAE with a critic, verl's default
trainer, 3 steps) runs twice on 2 logical GPUs: stock verl (``VERL_SPLIT`` unset) and split placement
with every overlap (``VERL_SPLIT=1``). For each run: the wall time of the whole ``main_ppo`` process
(start-up included), the mean step time of steps 2..S, and the peak summed RSS and PSS of its process
tree (driver, Ray, every worker; ``tests/support/proc_memory.py``). Tables show every repetition and
min / median / max, and the former budgets. Run from the repository root on an idle machine:

    .venv/bin/python benchmarks/dry_run_cost.py --json benchmarks/dry_run_cost.json   # ~6 min on 2 cores
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1] / "tests")
)  # support.proc_memory: a test helper, not in the wheel
from support.proc_memory import TreeMemorySampler  # noqa: E402

from verl_split.core import compat
from verl_split.dryrun import report
from verl_split.dryrun.assets import make_tiny_assets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, main_ppo_command, read_metrics, run_logged

GIB = 1 << 30
#: The budgets the dry-run tests used to assert.
BUDGET_WALL_S = 300
BUDGET_RSS_GIB = 8
LAYOUTS = {"stock": None, "split, overlaps on": "1"}


def run_once(assets, out: Path, steps: int, verl_split: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    if verl_split is not None:
        env.update(VERL_SPLIT=verl_split, VERL_SPLIT_OVERLAP="on")
    overrides = dry_run_overrides(assets, steps, "gae", None, out, n_gpus_per_node=2)
    samplers: list[TreeMemorySampler] = []

    def sample(pid: int) -> None:
        samplers.append(TreeMemorySampler(pid))
        samplers[-1].start()

    try:
        command, environment = main_ppo_command(overrides), run_environment(out, env)
        done = run_logged(command, environment, out, out / LOG_FILE, out / METRICS_FILE, on_start=sample)
    finally:
        for sampler in samplers:
            sampler.stop()
    if done.returncode != 0:
        sys.exit(f"main_ppo failed (exit status {done.returncode}); see {out / LOG_FILE}")
    return {
        "wall_s": done.wall_s,
        "step_s": report.mean_phases(read_metrics(out / METRICS_FILE))["step"],
        "peak_rss_gib": samplers[0].peak_rss / GIB,
        "peak_pss_gib": samplers[0].peak_pss / GIB,
    }


def stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the settings, every run and the summary here")
    args = parser.parse_args()

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dry_run_cost_") as tmp:
        assets = make_tiny_assets(Path(tmp) / "assets")
        for rep in range(1, args.repeats + 1):
            for layout, switch in LAYOUTS.items():
                out = Path(tmp) / f"rep{rep}_{layout.split(',')[0]}"
                print(f"repetition {rep}: {layout} ...", file=sys.stderr, flush=True)
                measured = run_once(assets, out, args.steps, switch)
                rows.append({"kind": "run", "repetition": rep, "layout": layout, **measured})

    job = f"tiny model, GAE + critic, {args.steps} steps, 2 logical GPUs"
    print(f"\nthe CPU dry run ({job}), verl {compat.installed_version()}")
    head = f"{'rep':>3}  {'layout':<20}{'wall s':>8}{'step s':>8}{'peak RSS GiB':>14}{'peak PSS GiB':>14}"
    print(head + "\n" + "-" * len(head))
    for r in rows:
        print(
            f"{r['repetition']:>3}  {r['layout']:<20}{r['wall_s']:8.1f}{r['step_s']:8.2f}"
            f"{r['peak_rss_gib']:14.2f}{r['peak_pss_gib']:14.2f}"
        )
    summary = {}
    for layout in LAYOUTS:
        mine = [r for r in rows if r["layout"] == layout]
        keys = ("wall_s", "step_s", "peak_rss_gib", "peak_pss_gib")
        summary[layout] = {key: stats([r[key] for r in mine]) for key in keys}
        wall, rss = summary[layout]["wall_s"], summary[layout]["peak_rss_gib"]
        print(
            f"{layout}: wall min/median/max {wall['min']:.0f}/{wall['median']:.0f}/{wall['max']:.0f} s "
            f"(former budget {BUDGET_WALL_S} s), peak RSS {rss['min']:.2f}/{rss['median']:.2f}/{rss['max']:.2f} GiB "
            f"(former budget {BUDGET_RSS_GIB} GiB)"
        )
    if args.json:
        settings = {
            "kind": "settings",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU used",
            "verl": compat.installed_version(),
            "minutes": (time.monotonic() - started) / 60,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg()[0],
            "repeats": args.repeats,
            "steps": args.steps,
        }
        args.json.write_text(json.dumps([settings, *rows, {"kind": "summary", **summary}], indent=2) + "\n")


if __name__ == "__main__":
    main()
