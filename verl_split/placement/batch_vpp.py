"""Megatron's virtual pipeline (VPP > 1): a rank's micro-batches of a call come in whole groups.

With an interleaved schedule verl's Megatron engine cuts each call's rows on a rank into micro-batches and
asserts that their count is a multiple of ``microbatch_group_size_per_vp_stage`` (megatron-core's default:
the pipeline size, ``ModelParallelConfig.__post_init__`` in ``megatron/core/model_parallel_config.py``;
citations mc_group_default), in ``MegatronEngine.forward_backward_batch``
(``workers/engine/megatron/transformer_impl.py``; vpp_micro_groups). So, per call and per rank:

* fixed micro-batches (no dynamic batch size): ``rows / micro-batch size`` is a multiple of the group;
* dynamic batch sizes: ``rearrange_micro_batches`` rounds the count up to a multiple of the group
  (``utils/seqlen_balancing.py``; seqlen_round_up), and each micro-batch needs a row of its own
  (``get_seqlen_balanced_partitions``; seqlen_partitions): the rank needs at least ``group`` rows.

The calls: the actor's update (its mini-batch per rank) and log-probs (the step's rows per rank), the
reference's log-probs, the critic's update and values (the critic's engine always uses dynamic batch sizes,
``batch_rules``' docstring). Engine workers only; 0.7's legacy Megatron workers are not checked.
"""

from __future__ import annotations

from verl_split.placement.batch_problem import CITES, Problem
from verl_split.placement.model import (
    ACTOR_MICRO,
    ACTOR_MINI,
    CRITIC_MINI,
    LOG_PROB_MICRO,
    REF_MICRO,
    TRAIN_BATCH,
    BatchConfig,
)


def vpp_problems(batch: BatchConfig, dp: dict[str, int], minis: dict[str, int], rows: int | None) -> list[Problem]:
    """The group rule for every call of a role with VPP > 1 (``minis``: role -> samples of a mini-batch)."""
    groups = dict(batch.vpp_groups)
    cite = CITES[batch.family]
    found: list[Problem] = []
    # (role, what, samples of the call, config key of the samples, micro-batch key, its dynamic switch)
    calls: list[tuple[str, str, int | None, str, str | None, str | None]] = [
        ("actor", "update", minis.get("actor"), ACTOR_MINI, ACTOR_MICRO, "actor"),
        ("actor", "log-probs", rows, TRAIN_BATCH, LOG_PROB_MICRO, "log_prob"),
        ("ref", "log-probs", rows, TRAIN_BATCH, REF_MICRO, "ref"),
        ("critic", "update", minis.get("critic"), CRITIC_MINI, None, None),
        ("critic", "values", rows, TRAIN_BATCH, None, None),
    ]
    for role, what, samples, key, micro_key, dynamic in calls:
        group = groups.get(role)
        if group is None or role not in dp or samples is None or samples % dp[role]:
            continue  # no VPP, or a rule of batch_rules already broken
        per_rank = samples // dp[role]
        micro = batch.get(micro_key) if micro_key else None
        fixed = bool(micro) and dynamic not in batch.dynamic
        head = f"its {what} gives each of its {dp[role]} ranks {per_rank} rows"
        why = f"with VPP > 1 they come in groups of {group} micro-batches (microbatch_group_size_per_vp_stage)"
        if fixed:
            assert micro is not None and micro_key is not None
            if per_rank % micro:
                continue  # not whole micro-batches: batch_rules' micro rule
            count = per_rank // micro
            if count % group:
                found.append(
                    Problem(
                        role,
                        f"{head}, {count} micro-batch{'' if count == 1 else 'es'} of {micro_key}={micro}, not a "
                        f"multiple of {group}: {why}",
                        cite["vpp"],
                        (key, micro_key),
                    )
                )
        elif per_rank < group:
            found.append(
                Problem(
                    role,
                    f"{head} with dynamic batch sizes, fewer than one for each micro-batch of a group of {group} "
                    "(VPP > 1: microbatch_group_size_per_vp_stage)",
                    cite["vpp_dynamic"],
                    (key,),
                )
            )
    return found
