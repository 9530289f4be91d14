"""One step of a run as ``verl-split advise`` reads it: its lanes, the metrics it reads them from, and spreads.

Below :mod:`verl_split.tools.advise.runs`, which reads whole runs from these. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.core import metric_names as names

#: Shared rollout's metrics: the share of sequences the critic pool generated, the weight push's seconds.
ROLLOUT_SHARE = names.CRITIC_POOL_ROLLOUT_SHARE
PUSH_S = names.SHARED_ROLLOUT_SYNC_S
#: With the deferral too, the critic pool joins generation late: whether it joined, when (seconds after the
#: step's first request; 0 when there from the start), and the generation time it saved at the actor pool's rate.
JOINED = names.CRITIC_POOL_JOINED
JOIN_S = names.CRITIC_POOL_JOIN_S
SAVED_S = names.SHARED_ROLLOUT_SAVED_S
#: The deferred critic update (``defer_critic``): its flag, its hidden part, the trainer's wait at its join.
DEFERRED = names.CRITIC_UPDATE_DEFERRED
HIDDEN_S = names.CRITIC_UPDATE_HIDDEN_S
JOIN_WAIT_S = names.CRITIC_JOIN_WAIT_S
#: verl's weight sync after the actor's update (0.8+ and v1; before, it is inside generation).
SYNC_S = "timing_s/update_weights"


@dataclass(frozen=True)
class Spread:
    """A quantity over a run's steady steps."""

    mean: float
    std: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        return cls(mean=mean, std=std, low=min(values), high=max(values), n=len(values))

    @classmethod
    def of_any(cls, values: Sequence[float]) -> Spread | None:
        return cls.of(values) if values else None

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "std": self.std, "min": self.low, "max": self.high, "steps": self.n}


def lane_times(step: Mapping[str, Any], join_wait: float | None = None) -> dict[str, float]:
    """One step's lanes that the step ran: a missing lane (no critic, a critic warm-up step) is left out.

    ``join_wait``: the trainer's wait at this step's values for the previous step's deferred critic update
    (logged with that step), inside verl's ``timing_s/values`` when values was not overlapped.
    """

    def get(key: str) -> float | None:
        return number(step.get(key))

    def timing(*names: str) -> float | None:
        values = [get(f"timing_s/{name}") for name in names]
        present = [v for v in values if v is not None]
        return sum(present) if present else None

    values = timing("values")
    if values is not None and join_wait:
        values = max(values - join_wait, 0.0)
    lanes = {
        "gen": get("timing_s/gen"),
        "actor_prep": get(names.PREP_ACTOR_S) if names.PREP_ACTOR_S in step else timing("old_log_prob", "ref"),
        "critic_prep": get(names.PREP_CRITIC_S) if names.PREP_CRITIC_S in step else values,
        "critic_update": get(names.CRITIC_UPDATE_S) if names.CRITIC_UPDATE_S in step else timing("update_critic"),
    }
    if names.CRITIC_UPDATE_S in step:  # verl-split timed the updates; no actor time: a critic warm-up step
        lanes["actor_update"] = get(names.ACTOR_UPDATE_S)
    else:
        lanes["actor_update"] = timing("update_actor")
    return {name: value for name, value in lanes.items() if value is not None}


def joined_late(step: Mapping[str, Any]) -> bool:
    """The critic pool did not open with the weight sync: it joined during generation, or never.

    Then the push (when there was one) ran beside the actor pool's generation, outside verl's weight sync."""
    joined, at = number(step.get(JOINED)), number(step.get(JOIN_S))
    return joined == 0.0 or (joined is not None and at is not None and at > 0.0)


def generation_pools(step: Mapping[str, Any]) -> str | None:
    """Which pools a late-join run's step generated on, as measured: "actor" (the critic pool never joined),
    "both" (it was there from the step's start), or None (it joined part-way: a mix of the two rates).

    A mixed step's ``timing_s/gen`` is neither pool size's time. ``split/shared_rollout_saved_s``, which would
    turn it into the actor pool's, is verl-split's own estimate at the actor pool's rate (a linear rate the
    runtime calls rough), so it never enters the fit as a measurement."""
    joined, at = number(step.get(JOINED)), number(step.get(JOIN_S))
    if joined == 0.0:
        return "actor"
    if joined is not None and (at is None or at <= 0.0):
        return "both"
    return None


def mean_tokens(steps: Sequence[Mapping[str, Any]]) -> float | None:
    """A sequence's mean length over the steps, prompt and response (verl's ``*_length/mean``); None: not logged."""
    prompts, responses = values(steps, "prompt_length/mean"), values(steps, "response_length/mean")
    return sum(prompts) / len(prompts) + sum(responses) / len(responses) if prompts and responses else None


def values(steps: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [v for v in (number(step.get(key)) for step in steps) if v is not None]


def pairs(steps: Sequence[Mapping[str, Any]], key: str, other: str) -> list[tuple[float, float | None]]:
    """(step[key], step[other] or None) for the steps that have ``key``."""
    return [(v, number(s.get(other))) for s in steps if (v := number(s.get(key))) is not None]


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
