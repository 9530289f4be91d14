"""Benchmark: the PPO update phase with and without overlap, side by side, on CPU.

For each actor:critic work ratio, the stock ``python -m verl.trainer.main_ppo`` runs the
same split-placement job twice (``VERL_SPLIT=1``, CPU dry run, 2 logical GPUs: actor
pool and critic pool one worker each, one thread per worker): once with
``VERL_SPLIT_OVERLAP=0`` (updates one after the other) and once with overlap. The work
ratio is set with PPO epochs. One pass of the actor costs more than one of the critic
(log-probs over the vocabulary, entropy), so a first, sequential calibration run with
equal epochs measures that cost ratio ``k``, and a target ratio ``r`` then gives the
actor ``round(critic_epochs * r / k)`` epochs. Times are verl-split's per-step metrics
(``split/*``, in verl's own tracker); the first step of each run is left out (it pays
one-off warm-up costs). Run it on an otherwise idle machine: two workers share 2 cores.

    efficiency = ideal wall / measured wall with overlap,  ideal wall = max(T_actor, T_critic)

T_actor and T_critic are taken from the sequential run, where the two do not compete
for the machine's cores. Run from the repository root (``make`` set-up done):

    .venv/bin/python benchmarks/update_overlap.py --json benchmarks/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from verl_split.assets import make_tiny_assets
from verl_split.demo import METRICS_FILE, dry_run_overrides, main_ppo_command, read_metrics, run_environment


def run_job(
    assets, out: Path, actor_epochs: int, overlap: bool, steps: int, critic_epochs: int, batch: int
) -> list[dict]:
    overrides = dry_run_overrides(assets, steps, "gae", "v1", out, n_gpus_per_node=2) + [
        f"critic.ppo_epochs={critic_epochs}",
        f"actor_rollout_ref.actor.ppo_epochs={actor_epochs}",
        f"data.train_batch_size={batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        f"critic.ppo_mini_batch_size={batch}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    env.update(VERL_SPLIT="1", VERL_SPLIT_OVERLAP="1" if overlap else "0", OMP_NUM_THREADS="1")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "main_ppo.log", "w") as log:
        proc = subprocess.run(
            main_ppo_command(overrides), env=run_environment(out, env), cwd=out, stdout=log, stderr=subprocess.STDOUT
        )
    if proc.returncode != 0:
        sys.exit(f"main_ppo failed (actor epochs {actor_epochs}, overlap {overlap}); see {out / 'main_ppo.log'}")
    return read_metrics(out / METRICS_FILE)[1:]  # step 1 pays one-off costs


def mean(steps: list[dict], key: str) -> float:
    return statistics.fmean(step[key] for step in steps)


def calibrate(assets, work: Path, steps: int, critic_epochs: int, batch: int) -> float:
    """How much more one actor epoch costs than one critic epoch, measured without overlap."""
    steps_run = run_job(assets, work / "calibration", critic_epochs, False, steps, critic_epochs, batch)
    return mean(steps_run, "split/actor_update_s") / mean(steps_run, "split/critic_update_s")


def measure(assets, work: Path, ratio: int, cost: float, steps: int, critic_epochs: int, batch: int) -> dict:
    actor_epochs = max(1, round(critic_epochs * ratio / cost))
    seq = run_job(assets, work / f"r{ratio}_sequential", actor_epochs, False, steps, critic_epochs, batch)
    par = run_job(assets, work / f"r{ratio}_overlap", actor_epochs, True, steps, critic_epochs, batch)
    t_actor, t_critic = mean(seq, "split/actor_update_s"), mean(seq, "split/critic_update_s")
    wall_seq, wall_par = mean(seq, "split/update_wall_s"), mean(par, "split/update_wall_s")
    ideal_wall = max(t_actor, t_critic)
    return {
        "ratio": f"{ratio}:1",
        "measured_ratio": t_actor / t_critic,
        "actor_epochs": actor_epochs,
        "critic_epochs": critic_epochs,
        "t_actor_s": t_actor,
        "t_critic_s": t_critic,
        "wall_sequential_s": wall_seq,
        "wall_overlap_s": wall_par,
        "ideal_wall_s": ideal_wall,
        "ideal_speedup": (t_actor + t_critic) / ideal_wall,
        "speedup": wall_seq / wall_par,
        "efficiency": ideal_wall / wall_par,
        "dispatch_overhead_ms": 1000 * mean(par, "split/dispatch_s"),
        "steps_averaged": len(par),
    }


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'ratio':>5} | {'measured':>8} | {'T_actor':>8} | {'T_critic':>8} | {'wall seq':>8} "
        f"| {'wall ovl':>8} | {'ideal':>8} "
        f"| {'speed-up':>8} | {'efficiency':>10} | {'dispatch':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['ratio']:>5} | {r['measured_ratio']:6.2f}:1 | {r['t_actor_s']:7.2f}s | {r['t_critic_s']:7.2f}s "
            f"| {r['wall_sequential_s']:7.2f}s "
            f"| {r['wall_overlap_s']:7.2f}s | {r['ideal_wall_s']:7.2f}s | {r['speedup']:7.2f}x "
            f"| {r['efficiency']:10.2f} | {r['dispatch_overhead_ms']:6.1f} ms"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratios", default="1,2,4", help="actor:critic work ratios to sweep (default %(default)s)")
    parser.add_argument("--steps", type=int, default=5, help="PPO steps per run; the first is not averaged")
    parser.add_argument("--critic-epochs", type=int, default=8, help="critic PPO epochs; the actor does ratio times")
    parser.add_argument("--batch", type=int, default=16, help="prompts per step (one mini-batch)")
    parser.add_argument("--work-dir", default=None, help="where runs write (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="also write the rows as a JSON list to this file")
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="verl_split_bench_")).resolve()
    assets = make_tiny_assets(work / "assets")
    print("calibrating: one actor epoch against one critic epoch ...", file=sys.stderr, flush=True)
    cost = calibrate(assets, work, args.steps, args.critic_epochs, args.batch)
    print(f"one actor epoch costs {cost:.2f}x a critic epoch", file=sys.stderr, flush=True)
    rows = []
    for ratio in (int(r) for r in args.ratios.split(",")):
        print(f"ratio {ratio}:1 ...", file=sys.stderr, flush=True)
        rows.append(measure(assets, work, ratio, cost, args.steps, args.critic_epochs, args.batch))
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
