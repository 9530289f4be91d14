"""The layout a run trained on: from its log when the log says, else from the flags; and where each came from.

What a log can say:

* verl-split's ``split/actor_pool_gpus`` and ``split/critic_pool_gpus``, logged every step of a verl-split run:
  the pools it trained on. The only proof that verl-split was on.
* the config verl prints at start-up (console output only): ``trainer.nnodes`` x ``trainer.n_gpus_per_node``,
  the cluster the run had, and a ``split_placement`` block, the placement it asked for (planned here by the
  real planner on that cluster).

A stock run (no ``split/*`` pool sizes) trained on one pool of every GPU of its cluster: the config's when
printed, else the flags' (``--nnodes`` x ``--n-gpus-per-node``), which then describe the run too. A run on
another cluster than the one advised for is fine: the model is fitted per pool size. What the log contradicts
is an error naming both sides: pools that differ from the config's planned placement, or pools larger than the
cluster the config (or, without one, the flags) gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verl_split.core import metric_names as names
from verl_split.core.errors import PlacementError, VerlSplitError
from verl_split.placement import CRITIC_POOL, Cluster, Job, Requirements, plan_placement
from verl_split.tools.advise.exports import AdviseError

CONFIG = "the config printed at start-up"
FLAGS = "--nnodes x --n-gpus-per-node (the log does not say)"
METRICS = "verl-split's split/actor_pool_gpus and split/critic_pool_gpus"


@dataclass(frozen=True)
class RunLayout:
    actor_gpus: int
    critic_gpus: int
    colocated: bool
    split_metrics: bool  # verl-split logged the pools
    cluster: Cluster  # the cluster the run trained on
    cluster_source: str
    pools_source: str
    notes: tuple[str, ...] = ()


#: verl's ``trainer.nnodes`` when a command does not set it (``verl/trainer/config/ppo_trainer.yaml``).
VERL_DEFAULT_NNODES = 1


def config_cluster(job: Job | None, overrides: bool = False) -> Cluster | None:
    """The cluster the job's config gives (``trainer.nnodes`` x ``trainer.n_gpus_per_node``), None when it does not.

    ``overrides``: the config is a command's overrides, which hold only what the command set: a GPU count without
    ``trainer.nnodes`` ran on verl's default, one node."""
    if job is None:
        return None
    nnodes, per_node = job.trainer.nnodes, job.trainer.n_gpus_per_node
    if overrides and nnodes is None:
        nnodes = VERL_DEFAULT_NNODES
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (nnodes, per_node)):
        return None
    return Cluster(nnodes=nnodes, n_gpus_per_node=per_node)


def planned_pools(job: Job, cluster: Cluster) -> tuple[tuple[int, int, bool] | None, str | None]:
    """The pools of the config's ``split_placement`` on the run's cluster: ((actor, critic, colocated), None),
    (None, why not), or (None, None) without the block."""
    if not isinstance(job.split.block, Mapping):
        return None, None
    from verl_split.placement.verl_config import placement_from_config, requirements_from_config

    try:
        needs = requirements_from_config(job)
        # The run has run: only its pool sizes matter here, not whether its batch or parallel sizes fit them.
        roles = Requirements(needs.critic, needs.critic_reason, needs.reward, needs.reward_own_pool)
        plan = plan_placement(placement_from_config(job, env_value=""), cluster, roles)
    except (PlacementError, VerlSplitError, ValueError) as exc:
        return None, f"its split_placement block could not be planned on {cluster.describe()}: {exc}"
    critic = next((pool for pool in plan.pools if pool.name == CRITIC_POOL), None)
    if critic is None:
        return (plan.pools[0].size, plan.pools[0].size, True), None
    return (plan.pools[0].size, critic.size, False), None


def run_layout(
    name: str, step: Mapping[str, Any], job: Job | None, flags: Cluster, config_source: str = CONFIG
) -> RunLayout:
    """The run's layout from its last steady step's metrics, its job and the flags; AdviseError on a clash.

    ``job``: the view of the printed config, or of the overrides the log's command echoed (``config_source`` says
    which); None when the log has neither.
    """
    logged = config_cluster(job, overrides=config_source != CONFIG)
    cluster, cluster_source = (logged, config_source) if logged is not None else (flags, FLAGS)
    if logged is not None and job is not None and job.trainer.nnodes is None:
        cluster_source += f" (trainer.nnodes unset there: verl's default, {VERL_DEFAULT_NNODES})"
    notes = []
    if logged is not None and (logged.nnodes, logged.n_gpus_per_node) != (flags.nnodes, flags.n_gpus_per_node):
        notes.append(
            f"trained on {logged.describe()} ({config_source}); advising for {flags.describe()} (the flags): "
            "the fit is per pool size"
        )
    planned, why_not = planned_pools(job, cluster) if job is not None else (None, None)
    if why_not:
        notes.append(why_not)
    actor, critic = _number(step.get(names.ACTOR_POOL_GPUS)), _number(step.get(names.CRITIC_POOL_GPUS))
    if actor is None:
        if planned is not None and not planned[2]:
            notes.append(
                "the config has a split_placement block but the run logged no split/* pool sizes: verl-split was "
                "off (VERL_SPLIT unset), so it ran stock"
            )
        source = f"stock (no split/* pool sizes): one pool of every GPU, {cluster_source}"
        return RunLayout(cluster.n_gpus, cluster.n_gpus, True, False, cluster, cluster_source, source, tuple(notes))
    a = int(actor)
    c = a if critic is None else int(critic)  # no critic: one pool
    shape = f"{cluster.describe()} ({cluster_source})"
    if critic is not None and a + c <= cluster.n_gpus:
        colocated = False
    else:
        # Equal sizes that do not fit side by side: one shared pool ('all'), unless the pools overlapped, which
        # verl-split does only on two pools.
        overlapped = any(_number(step.get(key)) for key in (names.OVERLAPPED, names.PREP_OVERLAPPED))
        if not (a == c and a <= cluster.n_gpus and not overlapped):
            fix = (
                "The log contradicts itself: check that this file holds one run."
                if logged is not None
                else "Pass the cluster the run trained on (--nnodes and --n-gpus-per-node)."
            )
            raise AdviseError(
                f"{name} trained on {a} actor-pool GPUs and {c} critic-pool GPUs, two pools, more than the cluster "
                f"{shape} holds (the pools: {METRICS}). {fix}"
            )
        colocated = True  # actor and critic shared one pool (placement 'all')
    if planned is not None and (planned[0], planned[1], planned[2]) != (a, c, colocated):
        asked = "one pool" if planned[2] else f"{planned[0]} actor + {planned[1]} critic GPUs"
        ran = "one pool" if colocated else f"{a} actor + {c} critic GPUs"
        raise AdviseError(
            f"{name}: {config_source} places the run as {asked} ({job.split.block} on "
            f"{cluster.describe()}), but its metrics say it trained on {ran} ({METRICS}). Check that the file "
            "holds one run; advise trusts neither when they disagree."
        )
    source = METRICS + (" (as the config's split_placement plans it)" if planned is not None else "")
    return RunLayout(a, c, colocated, True, cluster, cluster_source, source, tuple(notes))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)
