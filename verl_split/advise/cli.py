"""``verl-split advise``: does split placement pay for this job, and which split?

Reads the per-step metrics of one or more runs (verl's ``file`` logger), fits the cost model
(``verl_split/advise/model.py``) and ranks every placement the planner accepts on the cluster.
Bad input: one message on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from verl_split.errors import VerlSplitError

EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN.jsonl",
        help="Metrics files of the job's runs, as verl's file logger writes them (trainer.logger='[console,file]', "
        "VERL_FILE_LOGGER_PATH=RUN.jsonl): a stock run, a split run, or both.",
    )
    parser.add_argument("--nnodes", type=int, required=True, help="Nodes of the cluster the runs trained on.")
    parser.add_argument(
        "--n-gpus-per-node", type=int, required=True, dest="n_gpus_per_node", help="GPUs per node of that cluster."
    )
    parser.add_argument(
        "--rollout-tp", type=int, default=1, help="Rollout tensor-parallel size: pools must hold whole replicas."
    )
    parser.add_argument("--json", action="store_true", help="Print the runs, the model and the ranking as JSON.")
    parser.add_argument("--plot", metavar="FILE.png", help="Draw the predicted step time per placement, by phase.")


def run(args: argparse.Namespace) -> int:
    from verl_split.advise.advice import advise
    from verl_split.placement import Cluster

    try:
        cluster = Cluster(nnodes=args.nnodes, n_gpus_per_node=args.n_gpus_per_node)
        advice = advise(args.runs, cluster, rollout_tp=args.rollout_tp)
    except VerlSplitError as exc:
        print(f"verl-split advise: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(advice.to_json(), indent=2))
    else:
        from verl_split.advise.render import render_text

        print(render_text(advice))
    if args.plot:
        from verl_split.advise.render import plot_candidates

        try:
            plot_candidates(advice, args.plot)
        except OSError as exc:
            print(f"verl-split advise: cannot write the plot {args.plot}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if not args.json:
            print(f"plot: {args.plot}")
    return 0
