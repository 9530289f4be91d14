"""What every candidate placement must satisfy for this job: the planner's own requirements, read from the job's
config as the log gives it (:mod:`verl_split.tools.advise.log_job`), with ``advise``'s flags over it.

The rules themselves are the planner's (:func:`verl_split.placement.requirements_from_config`, then
:func:`verl_split.placement.plan_placement` per candidate): whole rollout replicas per node, the batch split over
each pool's data-parallel ranks, Megatron meshes. Nothing is restated here. A log that says nothing of the job
leaves only the rollout replica, from ``--rollout-tp`` or assumed 1, and says so.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.core.errors import VerlSplitError
from verl_split.placement import Job, ParallelSize, Requirements, job_from_config, requirements_from_config
from verl_split.tools.advise.log_job import CONFIG, OVERRIDES
from verl_split.tools.advise.runs import Run

ROLLOUT = "actor_rollout_ref.rollout"
FLAG = "--rollout-tp"


@dataclass(frozen=True)
class JobRequirements:
    requirements: Requirements
    rollout_gpus: int  # GPUs of one rollout replica (TP x DP x PP)
    rollout_source: str
    config: dict[str, Any] | None  # the config the rules were read from (the flag applied), None: none
    config_source: str  # CONFIG, OVERRIDES or ""
    notes: tuple[str, ...] = ()
    view: Job | None = None  # the job's view of ``config``, read once

    def to_json(self) -> dict[str, Any]:
        batch = self.requirements.batch
        return {
            "config_source": self.config_source or None,
            "rollout_replica_gpus": self.rollout_gpus,
            "rollout_source": self.rollout_source,
            "batch_rules": None if batch is None else f"verl {batch.family}, {batch.rules}",
            "megatron_meshes": [mesh.role for mesh in self.requirements.megatron],
            "notes": list(self.notes),
        }


def job_requirements(runs: Sequence[Run], has_critic: bool, rollout_tp: int | None = None) -> JobRequirements:
    """The requirements of the runs' job: the first printed config, else the first echoed overrides; the flag
    ``rollout_tp`` (``--rollout-tp``) over either."""
    found = next((run for run in runs if run.job_source == CONFIG), None)
    found = found or next((run for run in runs if run.job_source == OVERRIDES), None)
    critic_reason = "the runs measured a critic" if has_critic else "the runs measured no critic"
    notes = []
    if found is None or found.job_config is None:
        tp = rollout_tp or 1
        source = FLAG if rollout_tp else f"assumed 1: no run's log prints its config or echoes its command ({FLAG})"
        notes.append(
            "the logs hold neither verl's printed config nor the command's overrides: the rollout replica is "
            f"{'--rollout-tp' if rollout_tp else 'assumed 1 GPU'}, and no batch or Megatron rule is checked; a "
            "console log from the start of the run has both"
        )
        parallel = (ParallelSize("rollout", tp, FLAG, within_node=True),) if tp > 1 else ()
        requirements = Requirements(has_critic, critic_reason, parallel=parallel)
        return JobRequirements(requirements, tp, source, None, "", tuple(notes))
    config = copy.deepcopy(found.job_config)
    view = found.job or job_from_config(config)  # the run's view, read as its log was
    logged = _replica(view)
    if rollout_tp is not None:
        # The flag's replica, in the config handed on and in its view alike.
        _set(config, f"{ROLLOUT}.tensor_model_parallel_size", rollout_tp)
        for key in ("data_parallel_size", "pipeline_model_parallel_size"):
            _set(config, f"{ROLLOUT}.{key}", 1)
        view = dataclasses.replace(view, rollout=dataclasses.replace(view.rollout, tp=rollout_tp, dp=1, pp=1))
        if logged is not None and logged != rollout_tp:
            notes.append(f"{FLAG} {rollout_tp} overrides the rollout replica of {logged} GPU(s) in {found.job_source}")
    try:
        requirements = requirements_from_config(view)
    except (VerlSplitError, ValueError, TypeError, KeyError) as exc:
        notes.append(f"{found.job_source} of {found.path} could not be read for the planner's rules ({exc})")
        tp = rollout_tp or logged or 1
        parallel = (ParallelSize("rollout", tp, FLAG, within_node=True),) if tp > 1 else ()
        return JobRequirements(
            Requirements(has_critic, critic_reason, parallel=parallel), tp, FLAG, None, "", tuple(notes)
        )
    if requirements.critic != has_critic:  # the runs' own phases decide; the config may predate a switch
        notes.append(f"{found.job_source} says {requirements.critic_reason}, but {critic_reason}: the runs decide")
        requirements = dataclasses.replace(requirements, critic=has_critic, critic_reason=critic_reason)
    gpus = next((p.size for p in requirements.parallel if p.role == "rollout"), 1)
    source = FLAG if rollout_tp is not None else f"{found.job_source} of {found.path}"
    if found.job_source == OVERRIDES:
        notes.append(
            "the job's settings come from the overrides its command echoed: what it left at verl's defaults is not "
            "known, and the planner checks only the keys it has"
        )
    return JobRequirements(requirements, gpus, source, config, found.job_source, tuple(notes), view)


def _replica(view: Job) -> int | None:
    """The replica the log's config asks for, unset or non-positive sizes 1; None without a rollout TP."""
    rollout = view.rollout
    if rollout.tp is None:
        return None
    sizes = (rollout.tp, rollout.dp, rollout.pp)
    return math.prod(size if size is not None and size > 0 else 1 for size in sizes)


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
