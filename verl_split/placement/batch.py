"""Can each pool run the job's batch? The check, the sizes that would fit, and the message.

The rules themselves, with verl's file:line per family, are in ``placement.batch_rules``. A layout
that breaks one is refused before Ray starts, with the role, its pool, the numbers, where verl would
assert it, the nearest values of each key involved that fit on the same pools, and (from the planner)
the nearest layouts that fit with the job's own settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from verl_split.placement.batch_rules import Problem, problems
from verl_split.placement.model import ACTOR_MINI, CRITIC_MINI, TRAIN_BATCH, BatchConfig, Plan

#: How far from a key's value the search for a value that fits goes (a factor either way).
SEARCH_FACTOR = 4


def data_parallel_sizes(plan: Plan, batch: BatchConfig) -> dict[str, int]:
    """Role -> data-parallel size of its pool: the pool's GPUs over the role's model-parallel divisor.

    A Megatron role with dynamic context parallelism reports 1 whatever its pool (every DPxCP rank gets the
    whole batch: ``MegatronEngine.get_data_parallel_size`` in ``workers/engine/megatron/transformer_impl.py``,
    0.8+; ``core.citations`` dcp_data_parallel_size), and verl's dispatch and asserts use that.
    """
    sizes: dict[str, int] = {}
    for role, divisor in batch.divisors:
        pool = plan.pool_of(role)
        # A divisor that does not divide the pool is the parallel-size check's error, raised before.
        if pool is not None and divisor > 0 and pool.size % divisor == 0:
            sizes[role] = 1 if role in batch.single_dp else pool.size // divisor
    return sizes


def batch_problems(plan: Plan, batch: BatchConfig | None) -> list[Problem]:
    return [] if batch is None else problems(batch, data_parallel_sizes(plan, batch))


def nearest_fits(batch: BatchConfig, dp: dict[str, int], key: str, ignore: str | None = None) -> list[int]:
    """The nearest values of ``key``, below and above its own, that break no rule involving ``key``.

    A key's followers change with it (the critic's mini-batch follows the actor's in verl's config);
    rules that also involve ``ignore`` do not count (it is searched together with ``key``).
    """
    current = batch.get(key)
    if current is None or current < 1:
        return []
    involved = {key} | {k for k, leader in batch.followers if leader == key}

    def fits(value: int) -> bool:
        return not any(
            involved & set(p.keys) and ignore not in p.keys for p in problems(batch.with_value(key, value), dp)
        )

    upper = current * SEARCH_FACTOR
    if key in (ACTOR_MINI, CRITIC_MINI) and batch.get(TRAIN_BATCH):
        upper = min(upper, batch.get(TRAIN_BATCH) or upper)  # verl: train_batch_size >= ppo_mini_batch_size
    lower = max(1, current // SEARCH_FACTOR)
    below = next((v for v in range(current - 1, lower - 1, -1) if fits(v)), None)
    above = next((v for v in range(current + 1, upper + 1) if fits(v)), None)
    return [v for v in (below, above) if v is not None]


def joint_fits(batch: BatchConfig, dp: dict[str, int], key: str) -> list[str]:
    """``key`` together with the train batch size, when neither alone can fit (the RayPPOTrainer's rows)."""
    pairs = []
    for value in nearest_fits(batch, dp, key, ignore=TRAIN_BATCH):
        trains = nearest_fits(batch.with_value(key, value), dp, TRAIN_BATCH)
        if trains:
            pairs.append(f"{key}={value} with {TRAIN_BATCH}={' or '.join(str(t) for t in trains)}")
    return pairs


def batch_message(plan: Plan, batch: BatchConfig, found: Sequence[Problem], layouts: Sequence[str]) -> str:
    """One message for every broken rule, each with the values that fit; then the layouts that fit."""
    dp = data_parallel_sizes(plan, batch)
    lines = [
        f"{plan.source}={plan.placement!r}: the pools cannot run this job's batch ({batch.describe()}); verl would "
        "stop on an AssertionError after Ray has started:"
    ]
    for problem in found:
        pool = plan.pool_of(problem.role)
        where = f"{pool.name}, {pool.size} GPUs" if pool is not None else "no pool"
        divisor = batch.divisor(problem.role)
        if problem.role in batch.single_dp:
            where += ", dynamic context parallelism: one data-parallel rank"
        elif divisor > 1:
            where += f" / {divisor} model-parallel"
        fixes = []
        for key in problem.keys:
            values = nearest_fits(batch, dp, key)
            if values:
                fixes.append(f"{key}={' or '.join(str(v) for v in values)}")
            elif key != TRAIN_BATCH:
                fixes += joint_fits(batch, dp, key)
        fix = f" Fits on these pools: {', or '.join(fixes)}." if fixes else ""
        lines.append(
            f"  - {problem.role} ({where}, data-parallel size {dp.get(problem.role, '?')}): {problem.text}; "
            f"verl asserts it {problem.when}, at {problem.cite}.{fix}"
        )
    if layouts:
        lines.append(f"Or a layout whose pools fit this batch: {' or '.join(layouts)}.")
    return "\n".join(lines)
