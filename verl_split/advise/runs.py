"""Read runs for ``verl-split advise``: each phase's time on each pool, from verl's per-step metrics.

A run is the file verl's ``file`` logger writes (``trainer.logger=[console,file]``; the path is
``VERL_FILE_LOGGER_PATH``, else ``VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``): one JSON
object per line, ``{"step": N, "data": {...}}``. Flat lines (``{"step": N, "timing_s/gen": ...}``) are
read too. Records of the same step are merged (verl logs validation apart); records without
``timing_s/step`` are not training steps and are skipped.

The layout a run trained on is in its metrics: verl-split logs ``split/actor_pool_gpus`` and
``split/critic_pool_gpus`` every step. A run without them ran stock: every role on every GPU of the
cluster ``--nnodes`` x ``--n-gpus-per-node``.

Each step is broken into *lanes*, the work of one pool in one phase. Under split placement verl's
``timing_s/update_actor`` and ``timing_s/values`` measure the trainer's wait for work already under
way, so the lanes come from verl-split's own ``split/*`` times there; in a stock run, from verl's timers.
Everything else in the step (reward, advantages, weight sync, the rest) is ``fixed``: the cost model
treats it as independent of the placement. The first step (start-up, first allocations) is left out,
as in :func:`verl_split.report.steady_steps`.

A run with shared rollout (``VERL_SPLIT_SHARED_ROLLOUT=1``: rollout replicas on the critic pool too) logs
``split/critic_pool_rollout_share``; when the critic pool generated a share of the sequences, the run's
generation is counted on all its GPUs (actor pool + critic pool). Its weight push to the critic pool's
replicas, ``split/shared_rollout_sync_s``, runs in verl's weight sync, outside the phases timed here, so it
is taken out of the run's fixed part and kept apart: it is a cost of shared rollout, not of every layout.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_split.errors import VerlSplitError
from verl_split.placement import Cluster
from verl_split.report import phase_times, steady_steps

#: The lanes of one PPO step: (name, the pool that runs it, what it is).
LANES: tuple[tuple[str, str, str], ...] = (
    ("gen", "actor", "generation"),
    ("actor_prep", "actor", "old_log_prob + ref"),
    ("critic_prep", "critic", "values"),
    ("actor_update", "actor", "actor update"),
    ("critic_update", "critic", "critic update"),
)
LANE_POOL = {name: pool for name, pool, _ in LANES}
LANE_MEANING = {name: meaning for name, _, meaning in LANES}
#: The phases of :func:`verl_split.report.phase_times` that the cost model holds fixed.
FIXED_PHASES = ("reward", "adv", "other")
#: Shared rollout's metrics: the share of sequences the critic pool generated, the weight push's seconds.
ROLLOUT_SHARE = "split/critic_pool_rollout_share"
PUSH_S = "split/shared_rollout_sync_s"

_FILE_LOGGER_HINT = (
    "advise reads the per-step metrics verl's file logger writes: run with trainer.logger='[console,file]' "
    "and VERL_FILE_LOGGER_PATH=run.jsonl"
)


class AdviseError(VerlSplitError):
    """Input ``verl-split advise`` cannot use: the message says what is wrong and how to fix it."""


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

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "std": self.std, "min": self.low, "max": self.high, "steps": self.n}


@dataclass(frozen=True)
class Run:
    """One run: its layout and each lane's (and the fixed part's) time over its steady steps."""

    path: str
    #: GPUs of the actor's pool and of the critic's (the same pool when ``colocated``).
    actor_gpus: int
    critic_gpus: int
    colocated: bool
    split_metrics: bool  # the run logged verl-split's layout
    steps: tuple[int, ...]  # the steady steps the means are over
    first_step: int
    lanes: dict[str, Spread]
    fixed: Spread
    step: Spread
    notes: tuple[str, ...] = field(default=())
    #: Shared rollout: the share of sequences the critic pool generated, and the weight push to its replicas.
    rollout_share: Spread | None = None
    push: Spread | None = None

    @property
    def shared_rollout(self) -> bool:
        """The critic pool generated too: the run's generation ran on all its GPUs."""
        return not self.colocated and self.rollout_share is not None and self.rollout_share.mean > 0

    def gpus_of(self, lane: str) -> int:
        if lane == "gen" and self.shared_rollout:
            return self.actor_gpus + self.critic_gpus
        return self.actor_gpus if LANE_POOL[lane] == "actor" else self.critic_gpus

    @property
    def layout(self) -> str:
        if self.colocated:
            return f"one pool of {self.actor_gpus}" + ("" if self.split_metrics else " (stock)")
        shared = ", shared rollout" if self.shared_rollout else ""
        return f"{self.actor_gpus} actor + {self.critic_gpus} critic{shared}"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "layout": "colocated" if self.colocated else "split",
            "actor_pool_gpus": self.actor_gpus,
            "critic_pool_gpus": self.critic_gpus,
            "steps": list(self.steps),
            "lanes_s": {name: spread.to_json() for name, spread in self.lanes.items()},
            "fixed_s": self.fixed.to_json(),
            "step_s": self.step.to_json(),
            "shared_rollout": self.shared_rollout,
            "critic_pool_rollout_share": None if self.rollout_share is None else self.rollout_share.to_json(),
            "shared_rollout_sync_s": None if self.push is None else self.push.to_json(),
            "notes": list(self.notes),
        }


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The training steps of one metrics file, one flat dict per step (``step`` included)."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        raise AdviseError(f"{name}: no such file. {_FILE_LOGGER_HINT}.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AdviseError(f"{name}: cannot be read as text ({exc}). {_FILE_LOGGER_HINT}.") from None
    by_step: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise AdviseError(
                f"{name} line {number} is not JSON, so this is not a metrics file. {_FILE_LOGGER_HINT}."
            ) from None
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, bool) or not isinstance(step, int | float):
            raise AdviseError(
                f'{name} line {number} has no numeric "step", so this is not a metrics file. {_FILE_LOGGER_HINT}.'
            )
        data = record.get("data", record)
        if not isinstance(data, dict):
            raise AdviseError(f'{name} line {number}: "data" is not an object. {_FILE_LOGGER_HINT}.')
        by_step.setdefault(int(step), {}).update({k: v for k, v in data.items() if k != "step"})
    if not by_step:
        raise AdviseError(f"{name} is empty: the run logged no step. {_FILE_LOGGER_HINT}.")
    steps = [{"step": n, **data} for n, data in sorted(by_step.items()) if _number(data.get("timing_s/step"))]
    if not steps:
        raise AdviseError(
            f"{name} has metrics but no phase timings (no timing_s/step in any of its {len(by_step)} records): "
            "advise needs verl's timing_s/* metrics of training steps, which verl's PPO trainers log every step."
        )
    return steps


def lane_times(step: Mapping[str, Any]) -> dict[str, float]:
    """One step's lanes that the step ran: a missing lane (no critic, a critic warm-up step) is left out."""

    def get(key: str) -> float | None:
        return _number(step.get(key))

    def timing(*names: str) -> float | None:
        values = [get(f"timing_s/{name}") for name in names]
        present = [v for v in values if v is not None]
        return sum(present) if present else None

    lanes = {
        "gen": get("timing_s/gen"),
        "actor_prep": get("split/prep_actor_s") if "split/prep_actor_s" in step else timing("old_log_prob", "ref"),
        "critic_prep": get("split/prep_critic_s") if "split/prep_critic_s" in step else timing("values"),
        "critic_update": get("split/critic_update_s") if "split/critic_update_s" in step else timing("update_critic"),
    }
    if "split/critic_update_s" in step:  # verl-split timed the updates; no actor time: a critic warm-up step
        lanes["actor_update"] = get("split/actor_update_s")
    else:
        lanes["actor_update"] = timing("update_actor")
    return {name: value for name, value in lanes.items() if value is not None}


def read_run(path: str | os.PathLike[str], cluster: Cluster) -> Run:
    """Read one run and the layout it trained on; raise AdviseError if the cluster cannot hold it."""
    name = os.fspath(path)
    steps = read_records(name)
    steady = steady_steps(steps)
    notes = []
    if len(steps) == 1:
        notes.append(f"only step {steps[0]['step']}, which pays one-off start-up costs: run a few more steps")
    actor_gpus, critic_gpus, colocated = _layout(name, steady[-1], cluster)
    split_metrics = "split/actor_pool_gpus" in steady[-1]
    per_lane: dict[str, list[float]] = {lane: [] for lane in LANE_POOL}
    for step in steady:
        for lane, value in lane_times(step).items():
            per_lane[lane].append(value)
    if not per_lane["gen"]:
        raise AdviseError(
            f"{name} has no generation time (timing_s/gen) in steps {steady[0]['step']}-{steady[-1]['step']}: "
            "advise needs the timing_s/* metrics of verl's PPO trainer."
        )
    times = [phase_times(step) for step in steady]
    shares = [v for v in (_number(step.get(ROLLOUT_SHARE)) for step in steady) if v is not None]
    pushes = [_number(step.get(PUSH_S)) for step in steady]
    measured_pushes = [push for push in pushes if push is not None]
    # The push ran in verl's weight sync, which phase_times counts in 'other': out of the fixed part.
    fixed = [sum(t[p] for p in FIXED_PHASES) - (push or 0.0) for t, push in zip(times, pushes, strict=True)]
    rollout_share = Spread.of(shares) if shares else None
    if rollout_share is not None and rollout_share.mean > 0 and not colocated:
        even = critic_gpus / (actor_gpus + critic_gpus)
        notes.append(
            f"shared rollout: the critic pool generated {100 * rollout_share.mean:.0f} % of the sequences "
            f"({100 * even:.0f} % would be an even spread over the GPUs); its generation counts as on all "
            f"{actor_gpus + critic_gpus} GPUs"
        )
    return Run(
        path=name,
        actor_gpus=actor_gpus,
        critic_gpus=critic_gpus,
        colocated=colocated,
        split_metrics=split_metrics,
        steps=tuple(int(step["step"]) for step in steady),
        first_step=int(steps[0]["step"]),
        lanes={lane: Spread.of(values) for lane, values in per_lane.items() if values},
        fixed=Spread.of([max(value, 0.0) for value in fixed]),
        step=Spread.of([t["step"] for t in times]),
        notes=tuple(notes),
        rollout_share=rollout_share,
        push=Spread.of(measured_pushes) if measured_pushes else None,
    )


def _layout(name: str, step: Mapping[str, Any], cluster: Cluster) -> tuple[int, int, bool]:
    total = cluster.n_gpus
    actor = _number(step.get("split/actor_pool_gpus"))
    critic = _number(step.get("split/critic_pool_gpus"))
    shape = f"--nnodes {cluster.nnodes} --n-gpus-per-node {cluster.n_gpus_per_node} ({total} GPUs)"
    if actor is None:
        return total, total, True  # stock: every role on every GPU of the cluster
    a = int(actor)
    c = a if critic is None else int(critic)  # no critic: one pool
    if critic is not None and a + c <= total:
        return a, c, False
    # Equal sizes that do not fit side by side: one shared pool ('all'), unless the pools overlapped, which
    # verl-split does only on two pools.
    overlapped = any(_number(step.get(key)) for key in ("split/overlapped", "split/prep_overlapped"))
    if a == c and a <= total and not overlapped:
        return a, a, True  # actor and critic shared one pool (placement 'all')
    raise AdviseError(
        f"{name} trained on {a} actor-pool GPUs and {c} critic-pool GPUs, two pools, more than the cluster {shape} "
        "holds. Pass the cluster the run trained on (--nnodes and --n-gpus-per-node)."
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
