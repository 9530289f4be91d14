"""Does stock verl (placement ``all``) fit the cluster advised for, with the job's batch? If not, what would.

Scaling a job up is the case ``advise`` is most asked about, and there the job's own batch often stops fitting
stock: 256 samples over 32 ranks are 8 a rank, not whole micro-batches of 16. Then there is no stock baseline to
compare against (every row's speed-up is n/a), and the answer a user needs is the nearest batch that fits.

The rules and the search are the planner's (:mod:`verl_split.placement.batch`): the problems of ``all`` on the
cluster, each key's nearest values that fit. Micro-batch sizes are set apart: lowering them keeps the same
optimisation (only how many samples a GPU holds at once), so stock with the smaller micro-batches is the job's own
baseline, and the model predicts it (it does not see micro-batch sizes: a smaller one costs some speed per GPU).
A train or mini-batch size changes the job itself: it is named, never predicted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement import Cluster, Requirements, plan_placement
from verl_split.placement.batch import SEARCH_FACTOR, batch_problems, data_parallel_sizes, joint_fits, nearest_fits
from verl_split.placement.model import ACTOR_MINI, MICRO_BATCH_KEYS, TRAIN_BATCH, BatchConfig
from verl_split.tools.advise.candidates import STOCK


@dataclass(frozen=True)
class StockFit:
    """Why stock does not fit the cluster with the job's batch, and the nearest values that would."""

    cluster: Cluster
    problems: tuple[str, ...]  # each broken rule: the role, its ranks, the numbers
    #: key -> the nearest values, below and above, that break no rule involving the key.
    nearest: tuple[tuple[str, tuple[int, ...]], ...]
    #: For a key no value of which fits alone: the key with the train batch size (``key=v with train=w``).
    joint: tuple[str, ...] = ()
    #: The micro-batch sizes that alone let stock fit (the same optimisation); empty when none do.
    micro: tuple[tuple[str, int], ...] = ()
    #: The model's step for stock with ``micro``; None without them.
    predicted_step_s: float | None = None

    def overrides(self) -> str:
        return " ".join(f"{key}={value}" for key, value in self.micro)

    def nearest_text(self) -> str:
        single = [f"{key}={' or '.join(str(v) for v in values)}" for key, values in self.nearest if values]
        return ", or ".join([*single, *self.joint])

    def headline(self) -> str:
        """One line: stock does not fit, why, and what would."""
        fix = self.nearest_text()
        return (
            f"stock (placement {STOCK}) does not fit {self.cluster.describe()} with the job's batch: "
            f"{self.problems[0]}; so no row has a speed-up against stock (n/a)."
            + (f" Stock fits with {fix}." if fix else " No nearby batch value fits it.")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": False,
            "problems": list(self.problems),
            "nearest": {key: list(values) for key, values in self.nearest},
            "nearest_with_train_batch": list(self.joint),
            "micro_batches_that_fit": dict(self.micro) or None,
            "predicted_step_s_with_them": self.predicted_step_s,
        }


def stock_fit(cluster: Cluster, requirements: Requirements) -> StockFit | None:
    """None when stock plans on the cluster (or is refused for another reason than the batch, which the refused
    rows say); else why not and what would fit."""
    batch = requirements.batch
    if batch is None:
        return None
    try:
        plan_placement(STOCK, cluster, requirements, suggest=False)
        return None
    except PlacementError:
        pass
    try:
        plan = plan_placement(STOCK, cluster, dataclasses.replace(requirements, batch=None), suggest=False)
    except PlacementError:
        return None
    found = batch_problems(plan, batch)
    if not found:
        return None
    dp = data_parallel_sizes(plan, batch)
    nearest: dict[str, tuple[int, ...]] = {}
    for problem in found:
        for key in problem.keys:
            nearest.setdefault(key, tuple(nearest_fits(batch, dp, key)))
    alone = [key for key, values in nearest.items() if not values and key != TRAIN_BATCH]
    joint = tuple(pair for key in alone for pair in joint_fits(batch, dp, key))
    if not any(values for _, values in nearest.items()) and not joint:
        joint = scaled_batches(plan, batch)
    texts = tuple(f"{p.role} on {dp.get(p.role, '?')} data-parallel ranks: {p.text}" for p in found)
    return StockFit(cluster, texts, tuple(nearest.items()), joint, micro_batches_that_fit(plan, batch))


def scaled_batches(plan: Any, batch: BatchConfig) -> tuple[str, ...]:
    """The nearest train and mini-batch sizes, below and above, that fit together at the job's ratio of the two
    (``ppo_mini_batch_size=384 with data.train_batch_size=384``): where neither fits alone, the mini-batch is
    capped by the train batch."""
    train, mini = batch.get(TRAIN_BATCH), batch.get(ACTOR_MINI)
    if not train or not mini or train % mini:
        return ()
    ratio = train // mini

    def fits(value: int) -> bool:
        return not batch_problems(plan, batch.with_value(ACTOR_MINI, value).with_value(TRAIN_BATCH, value * ratio))

    below = next((v for v in range(mini - 1, max(1, mini // SEARCH_FACTOR) - 1, -1) if fits(v)), None)
    above = next((v for v in range(mini + 1, mini * SEARCH_FACTOR + 1) if fits(v)), None)
    return tuple(f"{ACTOR_MINI}={v} with {TRAIN_BATCH}={v * ratio}" for v in (below, above) if v is not None)


def micro_batches_that_fit(plan: Any, batch: BatchConfig) -> tuple[tuple[str, int], ...]:
    """Lower the micro-batch sizes the broken rules name, one at a time to their nearest value that fits, until
    stock fits; empty when a rule involves no micro-batch (the train or mini-batch must change)."""
    dp = data_parallel_sizes(plan, batch)
    changed: dict[str, int] = {}
    for _ in range(len(MICRO_BATCH_KEYS)):
        found = batch_problems(plan, batch)
        if not found:
            return tuple(changed.items())
        key = next((k for p in found for k in p.keys if k in MICRO_BATCH_KEYS and k not in changed), None)
        current = None if key is None else batch.get(key)
        if key is None or current is None:
            return ()
        values = sorted(nearest_fits(batch, dp, key), key=lambda v: (v > current, abs(v - current)))
        if not values:
            return ()
        batch = batch.with_value(key, values[0])
        changed[key] = values[0]
    return tuple(changed.items()) if not batch_problems(plan, batch) else ()
