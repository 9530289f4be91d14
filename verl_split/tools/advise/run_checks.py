"""Can the runs be fitted together, and on what does the fit rest? Checks across the runs, before the model.

* **One job.** The model fits each lane's scaling across the runs' pool sizes; two runs of different jobs (another
  model, other prompt or response lengths, another batch) differ for reasons the pool sizes do not explain, and
  the fit would read that difference as scaling. Compared where both logs say the key (their printed config, else
  their command's overrides); a run whose log says none of them is not compared, and that is said.
* **The run's GPUs, from its log or assumed.** A stock run's pool is its whole cluster; when its log does not say
  the cluster, the flags' (the cluster advised for) stands in, and advice that rests on that is flagged: more so
  when that assumed size is the only second pool size the fit has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verl_split.tools.advise.layout import FLAGS
from verl_split.tools.advise.runs import Run

#: What makes a run another job: (label, config key). The model compares by the last part of its path, so a local
#: copy and the hub's name of one model agree.
JOB_KEYS = (
    ("model", "actor_rollout_ref.model.path"),
    ("prompt length", "data.max_prompt_length"),
    ("response length", "data.max_response_length"),
    ("batch", "data.train_batch_size"),
    ("samples per prompt", "actor_rollout_ref.rollout.n"),
)


def _get(config: Mapping[str, Any] | None, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def job_identity(run: Run) -> dict[str, Any]:
    """The keys of ``JOB_KEYS`` the run's log says, by label."""
    found = {}
    for label, key in JOB_KEYS:
        value = _get(run.job_config, key)
        if value is None:
            continue
        if label == "model":
            value = str(value).rstrip("/").rsplit("/", 1)[-1]
        found[label] = value
    return found


def different_jobs(runs: Sequence[Run]) -> list[str]:
    """Each way the runs' jobs differ, as ``label: value (path) vs value (path)``; empty when they agree where
    both logs say."""
    differences = []
    identities = [(run, job_identity(run)) for run in runs]
    for label, _ in JOB_KEYS:
        said = [(run.path, ids[label]) for run, ids in identities if label in ids]
        if len({str(value) for _, value in said}) > 1:
            differences.append(f"{label}: " + " vs ".join(f"{value} ({path})" for path, value in said))
    return differences


def unknown_jobs(runs: Sequence[Run]) -> list[str]:
    """The runs whose log says nothing of the job, when there are several runs to compare."""
    if len(runs) < 2:
        return []
    return [run.path for run in runs if not job_identity(run)]


def assumed_cluster_flags(runs: Sequence[Run]) -> list[str]:
    """One line for each stock run whose GPUs come from the flags, not its log; the fit's reliance on it said."""
    lines = []
    for run in runs:
        if not run.colocated or run.split_metrics or run.cluster_source != FLAGS:
            continue
        others = {size for other in runs if other is not run for size in (other.actor_gpus, other.critic_gpus)}
        alone = others and run.actor_gpus not in others
        lines.append(
            f"{run.path}: its log does not say its GPUs, taken as the flags' {run.actor_gpus}"
            + (", the fit's only second pool size: the scaling rests on that assumption" if alone else "")
        )
    return lines
