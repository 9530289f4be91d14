"""Whole-step metrics: what split placement costs and saves over the entire PPO step.

The ``split/*`` metrics of the update and preparation phases describe their own phases;
users pay for the whole step, in which generation runs on the actor's pool alone. Just
before verl's tracker logs a step (``tracking.py``), verl-split adds:

- ``split/step_s``: verl's own ``timing_s/step``;
- ``split/actor_pool_busy_share``: (generation + old_log_prob + ref + actor update) / step;
- ``split/critic_pool_busy_share``: (values + critic update) / step; with shared rollout
  (``split/critic_pool_rollout_share`` > 0) generation counts on the critic pool too, since
  verl's load balancer keeps both pools' replicas busy until the batch is done.

Each lane counts the time its pool's workers were busy, as verl-split measured it from the
trainer (a lane's time includes its dispatch and result collection). Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl_split.core import metric_names as names


def whole_step_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """The whole-step ``split/*`` metrics for one step's metrics, or nothing for a step that
    verl-split did not coordinate (stock placement, validation-only records)."""
    step_s = float(data.get("timing_s/step") or 0.0)
    if step_s <= 0.0 or names.CRITIC_UPDATE_S not in data:
        return {}

    def value(key: str) -> float:
        return float(data.get(key) or 0.0)

    actor_busy = value("timing_s/gen") + value(names.PREP_ACTOR_S) + value(names.ACTOR_UPDATE_S)
    critic_busy = value(names.PREP_CRITIC_S) + value(names.CRITIC_UPDATE_S)
    if value(names.CRITIC_POOL_ROLLOUT_SHARE) > 0.0:
        critic_busy += value("timing_s/gen")
    return {
        names.STEP_S: step_s,
        names.ACTOR_POOL_BUSY_SHARE: min(actor_busy / step_s, 1.0),
        names.CRITIC_POOL_BUSY_SHARE: min(critic_busy / step_s, 1.0),
    }
