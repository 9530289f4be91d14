"""``verl-split advise``: does split placement pay for this job, and which split?

Reads the per-step metrics of one or more runs, from the logs verl users have (verl's console output of any
release, its file logger's JSONL, a CSV export of a tracker run; ``logs.py``), fits the cost model
(``verl_split/tools/advise/model.py``) and ranks every placement the planner accepts on the cluster.
With ``--profile`` it first runs the job itself, stock and ``halves`` with the overlaps off, for a few
steps each (``verl_split/tools/advise/profile.py``), then advises from those two runs the same way.
Bad input: one message on stderr, exit code 2; a profile run that fails: the end of its log, exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from verl_split.core.errors import VerlSplitError
from verl_split.tools.advise.profile import DEFAULT_OUT, DEFAULT_STEPS

if TYPE_CHECKING:
    from verl_split.placement import Cluster

EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 1
EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = (
        "verl-split advise LOG [LOG ...] --nnodes N --n-gpus-per-node G [options]\n"
        "       verl-split advise --profile --nnodes N --n-gpus-per-node G [--cpu] [--steps S] [--out DIR] "
        "[options] -- [HYDRA_OVERRIDES ...]"
    )
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="LOG | OVERRIDE",
        help="Logs of the job's runs (a stock run, a split run, or both), each in any of: verl's console output as "
        "saved from the driver's terminal (any verl release), verl's file logger JSONL (trainer.logger="
        "'[console,file]', VERL_FILE_LOGGER_PATH=RUN.jsonl), a CSV export of the run (a _step or step column, one "
        "column per metric). Told by content. With --profile: the job's hydra overrides instead, as python -m "
        "verl.trainer.main_ppo takes them (after --).",
    )
    parser.add_argument(
        "--nnodes",
        type=int,
        required=True,
        help="Nodes of the cluster to advise for; also the cluster of a run whose log does not print its config.",
    )
    parser.add_argument(
        "--n-gpus-per-node", type=int, required=True, dest="n_gpus_per_node", help="GPUs per node of that cluster."
    )
    parser.add_argument(
        "--rollout-tp",
        type=int,
        default=None,
        help="Rollout tensor-parallel size: pools must hold whole replicas (default: the logs' printed config or "
        "echoed command, else 1; with --profile, the job's).",
    )
    shared = parser.add_argument_group(
        "shared rollout: the +shared rows (rollout replicas on the critic pool too), what the runs do not measure"
    )
    shared.add_argument(
        "--push-s",
        type=float,
        default=None,
        metavar="S",
        help="Seconds per step to push the actor's weights to the critic pool's rollout replicas (default: the runs' "
        "split/shared_rollout_sync_s, else estimated from --model-params, else unknown and the rows are not ranked).",
    )
    shared.add_argument(
        "--model-params",
        "--actor-params",
        dest="model_params",
        type=_parameter_count,
        default=None,
        metavar="N",
        help="The actor's parameter count (7e9, 7B, 500M), to estimate the push at an assumed bandwidth when no run "
        "measured it, and for the memory rule (default: its config.json, else the size in its name).",
    )
    shared.add_argument(
        "--critic-offload-s",
        type=float,
        default=None,
        metavar="S",
        help="Seconds per step to offload the critic's training state for generation and reload it, beyond what "
        "the runs measured (default: assumed 0; verl's own critic offload, when on in the runs, is in their times).",
    )
    memory = parser.add_argument_group("memory: each pool must hold its models")
    memory.add_argument(
        "--gpu-memory",
        type=float,
        default=None,
        metavar="GIB",
        help="Memory of one GPU in GiB (80 for an 80 GB A100/H100): a layout whose pool cannot hold its models' "
        "parameters, gradients and optimizer state (as the job's config offloads them) is refused. Without it "
        "nothing is refused and the estimate is shown.",
    )
    memory.add_argument(
        "--critic-params",
        type=_parameter_count,
        default=None,
        metavar="N",
        help="The critic's parameter count (default: its config.json, else the size in its name).",
    )
    parser.add_argument(
        "--different-jobs",
        action="store_true",
        help="Fit runs whose logs say they ran different jobs (model, prompt or response length, batch) instead of "
        "refusing them; the advice is then flagged.",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="Print each run's lanes, the fitted model, every refused layout's reason and every assumption.",
    )
    parser.add_argument("--json", action="store_true", help="Print the runs, the model and the ranking as JSON.")
    parser.add_argument("--plot", metavar="FILE.png", help="Draw the predicted step time per placement, by phase.")
    profile = parser.add_argument_group("--profile: measure the job first")
    profile.add_argument(
        "--profile",
        action="store_true",
        help="Run the job (its overrides after --) for --steps steps as stock verl and as halves with the overlaps "
        "off, each in its own folder under --out, then advise from what they measured.",
    )
    profile.add_argument(
        "--steps", type=int, default=None, help=f"Training steps per run (default {DEFAULT_STEPS}; step 1 is left out)."
    )
    profile.add_argument("--out", default=None, help=f"Folder of the runs (default ./{DEFAULT_OUT}).")
    profile.add_argument(
        "--cpu",
        action="store_true",
        help="Run verl-split's CPU dry run (VERL_SPLIT_CPU=1, the tiny model and data) on --n-gpus-per-node logical "
        "GPUs, no GPU needed; the overrides after -- change the tiny job. Without it, set VERL_SPLIT_CPU=1 to run "
        "your own job on CPU.",
    )
    profile.add_argument(
        "--assets", default=None, help="With --cpu: cache folder of the tiny assets (default OUT/assets)."
    )


def _parameter_count(text: str) -> float:
    """``7e9``, ``7B``, ``1.5b``, ``500M``: a parameter count."""
    scale = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}.get(text[-1:].lower(), 1.0)
    number = text[:-1] if scale != 1.0 else text
    try:
        count = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count (e.g. 7e9 or 7B)") from None
    if not count > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive parameter count")
    return count


def check_arguments(args: argparse.Namespace) -> None:
    """Flags that make no sense together: AdviseError with what to do instead."""
    from verl_split.tools.advise.runs import AdviseError

    if args.gpu_memory is not None and not 0 < args.gpu_memory < float("inf"):
        raise AdviseError(f"--gpu-memory {args.gpu_memory}: give one GPU's memory in GiB, e.g. 80.")
    for flag, value in (("--push-s", args.push_s), ("--critic-offload-s", args.critic_offload_s)):
        if value is not None and not 0 <= value < float("inf"):
            raise AdviseError(f"{flag} {value}: give seconds, 0 or more.")
    if args.profile:
        return
    given = [flag for flag, value in (("--steps", args.steps), ("--out", args.out), ("--assets", args.assets)) if value]
    given += ["--cpu"] if args.cpu else []
    if given:
        raise AdviseError(f"{', '.join(given)} only with --profile (which runs the job); add --profile or drop them.")
    if not args.runs:
        raise AdviseError(
            "no run given: pass one or more logs of the job's runs (verl's console output, its file logger's JSONL, "
            "or a CSV export), or --profile -- <the job's hydra overrides> to run the job first."
        )


def run(args: argparse.Namespace) -> int:
    from verl_split.placement import Cluster
    from verl_split.tools.advise.advice import advise

    try:
        check_arguments(args)
        cluster = Cluster(nnodes=args.nnodes, n_gpus_per_node=args.n_gpus_per_node)
        if args.profile:
            code, paths, rollout_tp = _profile(args, cluster)
            if code:
                return code
        else:
            paths, rollout_tp = args.runs, args.rollout_tp  # None: what the logs say
        advice = advise(
            paths,
            cluster,
            rollout_tp=rollout_tp,
            push_s=args.push_s,
            model_params=args.model_params,
            critic_offload_s=args.critic_offload_s,
            gpu_gb=args.gpu_memory,
            critic_params=args.critic_params,
            allow_different_jobs=args.different_jobs,
        )
    except VerlSplitError as exc:
        print(f"verl-split advise: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        from verl_split.tools.advise.summary import confidence, summary_lines

        level, why = confidence(advice)
        report = {**advice.to_json(), "confidence": {"level": level, "why": why}, "summary": summary_lines(advice)}
        print(json.dumps(report, indent=2))
    else:
        from verl_split.tools.advise.render import render_text

        if args.profile:  # before the report, which ends on its summary
            files = " ".join(str(path) for path in paths)
            print(
                f"advise again from these runs: verl-split advise {files} --nnodes {args.nnodes} "
                f"--n-gpus-per-node {args.n_gpus_per_node}\n"
            )
        print(render_text(advice, verbose=args.verbose))
    if args.plot:
        from verl_split.tools.advise.render import plot_candidates

        try:
            plot_candidates(advice, args.plot)
        except OSError as exc:
            print(f"verl-split advise: cannot write the plot {args.plot}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if not args.json:
            print(f"plot: {args.plot}")
    return 0


def _profile(args: argparse.Namespace, cluster: Cluster) -> tuple[int, list[Path], int]:
    """Check, then run the profile; (exit code, metrics files, rollout replica GPUs)."""
    from verl_split.tools.advise import profile

    plan = profile.prepare(
        args.runs,
        cluster,
        steps=DEFAULT_STEPS if args.steps is None else args.steps,
        out=args.out or DEFAULT_OUT,
        cpu=args.cpu,
        assets=args.assets,
        rollout_tp=args.rollout_tp,
    )
    # With --json, stdout is the JSON alone: progress goes to stderr.
    try:
        paths = profile.run_profile(plan, sys.stderr if args.json else sys.stdout)
    except profile.ProfileRunFailed as exc:
        print(f"verl-split advise: {exc}", file=sys.stderr)
        return EXIT_RUN_FAILED, [], plan.rollout_tp
    except KeyboardInterrupt:  # run_logged has stopped the run's whole process group
        print(f"verl-split advise: interrupted; the runs so far are in {plan.out}", file=sys.stderr)
        return EXIT_INTERRUPTED, [], plan.rollout_tp
    return 0, paths, plan.rollout_tp
