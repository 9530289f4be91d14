"""The job's batch sizes, and which family's batch rules apply (``placement.batch_rules``), from its view.

The view (``placement.job``) says which rules the run's workers follow and where each role's Ulysses size is
read (``placement.job_config``'s docstring says why per family); this module turns it into the planner's
``BatchConfig``.
"""

from __future__ import annotations

from typing import Any

from verl_split.core import compat
from verl_split.placement.job import Job
from verl_split.placement.job_config import FAMILIES, as_job
from verl_split.placement.model import BatchConfig

__all__ = ["FAMILIES", "batch_from_config", "batch_of", "ignored_ulysses_note", "ulysses_note"]


def ignored_ulysses_note(config: Any, family: str) -> str | None:
    """A note when the critic's role-level Ulysses key is set but the run's critic does not read it."""
    return ulysses_note(as_job(config, family), family)


def ulysses_note(job: Job, family: str) -> str | None:
    """``ignored_ulysses_note`` of the job's view; ``family`` is the release the note names."""
    critic = job.critic
    asked = critic.ulysses_role_key or 1
    if job.rules == "legacy" or asked <= 1 or critic.ulysses_size == asked:
        return None
    ((key, _),) = critic.ulysses
    return (
        f"critic.ulysses_sequence_parallel_size={asked} is not read by verl {family}'s engine critic (its engine "
        f"block is): the critic trains without sequence parallelism. Set {key}={asked} to have it."
    )


def batch_from_config(config: Any, family: str | None = None) -> BatchConfig | None:
    """The run's batch: None when the config has no train batch size (nothing to check)."""
    return batch_of(as_job(config, family))


def batch_of(job: Job) -> BatchConfig | None:
    """The job's batch, by the rules of the family its view was read for; None without a train batch size."""
    if not job.batch.train_batch_set:
        return None
    family, rules = job.family, job.rules
    dynamic = {name for name, on in (("actor", job.actor.dynamic_bsz), ("ref", job.ref.dynamic_bsz)) if on}
    if job.rollout.log_prob_dynamic_bsz:
        dynamic.add("log_prob")

    divisors = []
    megatron, single_dp, vpp_groups = set(), set(), []
    for role in ("actor", "ref", "critic"):
        if role == "ref" and not job.uses_reference:
            continue
        mesh = job.role(role).mesh
        divisors.append((role, mesh.model_size if mesh is not None else job.role(role).ulysses_size))
        if mesh is None:
            continue
        if rules == "legacy":
            megatron.add(role)
            continue
        if mesh.dynamic_cp and compat.family_in(family, compat.ENGINE_WORKERS):  # 0.7 has no dynamic CP
            single_dp.add(role)
            # 0.9's dynamic-CP scheduler cuts the micro-batches, not prepare_micro_batches
            # (MegatronEngine.forward_backward_batch in workers/engine/megatron/transformer_impl.py, 0.9.1).
            if compat.family_in(family, compat.V1_TRAINER):
                dynamic |= {"actor", "log_prob"} if role == "actor" else {role}
        if mesh.interleaved:
            vpp_groups.append((role, mesh.group))
    return BatchConfig(
        family=family,
        rules=rules,
        values=job.batch.values,
        followers=job.batch.followers,
        dynamic=frozenset(dynamic),
        divisors=tuple(divisors),
        megatron=frozenset(megatron),
        single_dp=frozenset(single_dp),
        vpp_groups=tuple(vpp_groups),
    )
