"""``verl-split plan``: show how a placement maps roles onto the cluster's GPUs.

Two ways in: a cluster shape and a placement (``--nnodes 2 --n-gpus-per-node 8 --placement 6:2``),
or verl's own trainer config composed with hydra plus the overrides a run would get
(``--config-name ppo_trainer trainer.nnodes=2 +split_placement.placement=6:2``).
The placement comes from ``--placement``, else the config's ``split_placement``, else
``VERL_SPLIT_PLACEMENT``, else ``halves``; shared rollout from ``--shared-rollout``, else the
config's ``split_placement.shared_rollout``, else ``VERL_SPLIT_SHARED_ROLLOUT``, else off.
With a config, the job's batch is checked against every pool by the installed verl's rules (``--verl``
picks another family's), and so are Megatron's parallel sizes (``placement.megatron``); without one, no
batch rule is checked, and a line on stderr names what was not (``unchecked_without_config``).
Bad input: one message on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

from verl_split import placement as planner
from verl_split.core import compat
from verl_split.core.errors import VerlSplitError
from verl_split.tools.hydra_config import compose_config

EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nnodes", type=int, help="Number of nodes (default: trainer.nnodes, else 1).")
    parser.add_argument(
        "--n-gpus-per-node",
        type=int,
        dest="n_gpus_per_node",
        help="GPUs per node (default: trainer.n_gpus_per_node, else 8).",
    )
    parser.add_argument(
        "--placement",
        help="halves, per-node, per-group, all, A:C, or ROLES:GPUS groups such as "
        "'actor,rollout,ref:0-5;critic,reward:6-7' (default: the config's split_placement, "
        "else VERL_SPLIT_PLACEMENT, else halves).",
    )
    parser.add_argument("--no-critic", action="store_true", help="Plan a run without a critic (GRPO and the like).")
    parser.add_argument("--reward-model", action="store_true", help="Plan a run with a reward model to place.")
    parser.add_argument(
        "--rollout-tp", type=int, default=1, help="Rollout tensor-parallel size to check pools against."
    )
    parser.add_argument(
        "--shared-rollout",
        action="store_true",
        help="Plan with rollout replicas on the critic pool too (default: the config's "
        "split_placement.shared_rollout, else VERL_SPLIT_SHARED_ROLLOUT, else off).",
    )
    # advise's names for the same two values are accepted too (--gpu-memory, --model-params): one spelling
    # works in both commands; the older names stay.
    parser.add_argument(
        "--gpu-memory",
        "--gpu-memory-gb",
        dest="gpu_memory_gb",
        type=float,
        help="With --shared-rollout: the memory of one GPU (GiB), to check the critic pool's estimate against.",
    )
    parser.add_argument(
        "--critic-params",
        type=_params,
        help="With --shared-rollout: the critic's parameters (7B, 1.5e9), else read from critic.model.path.",
    )
    parser.add_argument(
        "--actor-params",
        "--model-params",
        dest="actor_params",
        type=_params,
        help="With --shared-rollout: the actor's parameters, for the push's memory on an actor-pool GPU "
        "(else read from actor_rollout_ref.model.path).",
    )
    parser.add_argument(
        "--verl",
        choices=compat.SUPPORTED_FAMILIES,
        help="Check the job's batch with this verl family's rules (default: the installed verl's).",
    )
    parser.add_argument("--config-name", help="Compose this verl trainer config with hydra (e.g. ppo_trainer).")
    parser.add_argument("--config-path", help="Directory of the config (default: verl's trainer/config).")
    parser.add_argument(
        "--json", action="store_true", help="Print only {resource_pool_spec, mapping, shared_rollout} as JSON."
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides, e.g. trainer.nnodes=2 +split_placement.placement=6:2"
    )


def run(args: argparse.Namespace) -> int:
    try:
        plan = build_plan(args)
    except VerlSplitError as exc:
        print(f"verl-split plan: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(plan.to_json()))
    else:
        print(planner.render_plan(plan))
        if not has_config(args):
            # On stderr: the picture on stdout stays what a script or a doc compares.
            print(unchecked_without_config(args), file=sys.stderr)
    return 0


def has_config(args: argparse.Namespace) -> bool:
    """Whether the command composes verl's config (a config name or path, or any override)."""
    return bool(args.config_name or args.config_path or args.overrides)


def unchecked_without_config(args: argparse.Namespace) -> str:
    """What a plan from the cluster's shape alone leaves out, and how to have it checked: with verl's config the
    same layout can be refused (its default rollout tensor-parallel size, the job's batch)."""
    placement = f"--placement {shlex.quote(args.placement)} " if args.placement else ""
    return (
        "verl-split plan: checked the layout only. Not checked without your job's config: its batch sizes against "
        f"each pool, its rollout tensor-parallel size (checked here: {args.rollout_tp}, from --rollout-tp), "
        "Megatron's parallel sizes. To check them, give the job's overrides: "
        f"verl-split plan {placement}<your overrides>"
    )


def build_plan(args: argparse.Namespace) -> planner.Plan:
    """``--placement`` wins; else ``placement_from_config``'s own order (config, environment, default)."""
    from verl_split.core import settings

    config: Any = None
    if has_config(args):
        config = compose_config(args.config_name or "ppo_trainer", args.config_path, args.overrides)
    # Without a config: verl's defaults (v1 sync trainer, no LoRA) for what shared rollout checks.
    job = planner.job_from_config({} if config is None else config, family=args.verl)
    if config is not None:
        requirements = planner.requirements_from_config(job)
        nnodes = job.trainer.nnodes if args.nnodes is None else args.nnodes
        per_node = job.trainer.n_gpus_per_node if args.n_gpus_per_node is None else args.n_gpus_per_node
    else:
        requirements = planner.Requirements(
            critic=not args.no_critic,
            critic_reason="--no-critic" if args.no_critic else "PPO with a critic (the default; --no-critic for GRPO)",
            reward=args.reward_model,
            parallel=(planner.ParallelSize("rollout", args.rollout_tp, "--rollout-tp", within_node=True),)
            if args.rollout_tp > 1
            else (),
        )
        nnodes = 1 if args.nnodes is None else args.nnodes
        per_node = 8 if args.n_gpus_per_node is None else args.n_gpus_per_node
    # The plan a VERL_SPLIT=1 run would get: with the switch off settings reads no other variable.
    env = settings.read({**os.environ, "VERL_SPLIT": "1"})
    if args.placement:
        chosen = planner.parse_placement(args.placement, source="--placement")
    else:
        chosen = planner.placement_from_config(job, env.placement)
    shared = args.shared_rollout or planner.shared_rollout_from_config(job, env.shared_rollout)
    if shared:
        planner.check_shared_rollout_run(job)  # the release is checked still
    cluster = planner.Cluster(nnodes=nnodes, n_gpus_per_node=per_node)
    plan = planner.plan_placement(chosen, cluster, requirements, shared_rollout=shared)
    if shared:
        from verl_split.placement.memory import with_memory_estimate

        plan = with_memory_estimate(plan, job, args.gpu_memory_gb, args.critic_params, args.actor_params)
    return plan


def _params(text: str) -> float:
    """``7B``, ``350M``, ``1.5e9`` -> parameters."""
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text.strip()[-1:].upper(), 1.0)
    number = text.strip()[:-1] if scale != 1.0 else text.strip()
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count such as 7B, 350M or 1.5e9") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a parameter count is above 0")
    return value


class _BadInput(VerlSplitError):
    """The command line or the config it names cannot be read."""
