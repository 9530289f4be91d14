"""Read runs for ``verl-split advise``: each phase's time on each pool, from verl's per-step metrics.

A run is one log of a job's run, in any format :mod:`verl_split.tools.advise.logs` reads (verl's console output of
any release, verl's JSONL file logger, a CSV export of a tracker run), told by content. Its layout comes from
the log when the log says, else from the flags (:mod:`verl_split.tools.advise.layout`).

Each step is broken into *lanes*, the work of one pool in one phase. Under split placement verl's
``timing_s/update_actor`` and ``timing_s/values`` measure the trainer's wait for work already under
way, so the lanes come from verl-split's own ``split/*`` times there; in a stock run, from verl's timers.
Everything else in the step (reward, advantages, weight sync, the rest) is ``fixed``, independent of the
placement. The first step (start-up) is left out, as in :func:`verl_split.dryrun.report.steady_steps`.

A run with shared rollout (rollout replicas on the critic pool too) whose critic pool generated
(``split/critic_pool_rollout_share`` > 0) counts its generation on all its GPUs; its weight push
(``split/shared_rollout_sync_s``, in verl's weight sync) is taken out of the fixed part: a cost of shared rollout.

With the deferral on too, a critic pool that did not open with the weight sync joins generation late
(``split/critic_pool_joined``, ``split/critic_pool_join_s``): only its steps on one pool size measure generation
(``generation_pools``; ``split/shared_rollout_saved_estimate_s`` is an estimate); its push ran beside generation.

A run with the critic's update deferred (``defer_critic`` in ``VERL_SPLIT_OVERLAP``) logs
``split/critic_update_deferred``, ``split/critic_update_hidden_s`` and ``split/critic_join_wait_s``: its
``timing_s/update_critic`` is only the dispatch, the critic update's lane is ``split/critic_update_s`` as in
every split run, and without the preparation overlap the wait at the join (inside the next step's
``timing_s/values``) is taken out of the values lane.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_split.core import metric_names as names
from verl_split.core.errors import PlacementError
from verl_split.dryrun.report import phase_times, steady_steps
from verl_split.placement import Cluster, Job, job_from_config
from verl_split.tools.advise.exports import AdviseError
from verl_split.tools.advise.layout import CONFIG, RunLayout, run_layout
from verl_split.tools.advise.log_job import job_config, model_shape
from verl_split.tools.advise.logs import CSV, PeriodicWork, read_log
from verl_split.tools.advise.streaming import stream_notes
from verl_split.tools.advise.tail import tail_notes

__all__ = ["AdviseError", "LANES", "PUSH_S", "SYNC_S", "Run", "Spread", "lane_times", "read_records", "read_run"]

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
#: verl's peak of ``torch.cuda.max_memory_reserved`` over a step's workers, GiB (``perf/max_memory_reserved_gb``).
RESERVED_GB = "perf/max_memory_reserved_gb"
#: The phases of :func:`verl_split.dryrun.report.phase_times` that the cost model holds fixed.
FIXED_PHASES = ("reward", "adv", "other")

#: Shared rollout's metrics: the share of sequences the critic pool generated, the weight push's seconds.
ROLLOUT_SHARE = names.CRITIC_POOL_ROLLOUT_SHARE
PUSH_S = names.SHARED_ROLLOUT_SYNC_S
#: With the deferral too, the critic pool joins generation late: whether it joined, when (seconds after the
#: step's first request; 0 when there from the start), and the generation time it saved at the actor pool's rate.
JOINED = names.CRITIC_POOL_JOINED
JOIN_S = names.CRITIC_POOL_JOIN_S
SAVED_S = names.SHARED_ROLLOUT_SAVED_ESTIMATE_S
#: The deferred critic update (``defer_critic``): its hidden part, the trainer's wait at its join.
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
    #: How the log was read: its format, the cluster it trained on and where the layout came from.
    format: str = ""
    cluster: Cluster | None = None
    layout_source: str = ""
    cluster_source: str = ""  # where ``cluster`` came from: the log (its config or command), or the flags
    #: verl's weight sync after the actor update; a deferred critic update's hidden part and join wait.
    sync: Spread | None = None
    hidden: Spread | None = None
    join_wait: Spread | None = None
    #: Both switches on: the critic pool joined generation late (or never) in a step; per step, whether it
    #: joined, when (the steps that logged it), what it saved at the actor pool's rate.
    late_join: bool = False
    joined: Spread | None = None
    join_at: Spread | None = None
    saved: Spread | None = None
    #: Validation and checkpoint saves, every few steps: out of the lanes, the fixed part and the spread.
    periodic: tuple[PeriodicWork, ...] = ()
    #: The job's config as the log gives it (printed, else the echoed overrides), and which of the two.
    job_config: dict[str, Any] | None = field(default=None, compare=False)
    job: Job | None = field(default=None, compare=False)  # its view, read once (``placement.job``)
    job_source: str = ""
    model_shape: dict[str, int] | None = None  # layers, KV heads, head size as the workers printed them
    mean_tokens: float | None = None  # prompt_length/mean + response_length/mean over the steady steps
    #: A late-join run's generation in the steps where the critic pool was there from the start (A + C GPUs).
    gen_both: Spread | None = None
    #: The most GPU memory a step reserved (verl's ``perf/max_memory_reserved_gb``), when logged.
    max_reserved_gb: float | None = None

    def periodic_spread(self, work: PeriodicWork) -> Spread:
        return Spread.of([work.seconds[n] for n in work.steps])

    @property
    def shared_rollout(self) -> bool:
        """The critic pool generated too (from the start; or late, ``late_join``)."""
        return not self.colocated and self.rollout_share is not None and self.rollout_share.mean > 0

    @property
    def deferred(self) -> bool:
        """The run deferred the critic's update into the next step (``defer_critic``)."""
        return self.join_wait is not None

    def gpus_of(self, lane: str) -> int:
        # A late join's generation is counted as the actor pool's alone (read_run adds back what it saved).
        if lane == "gen" and self.shared_rollout and not self.late_join:
            return self.actor_gpus + self.critic_gpus
        return self.actor_gpus if LANE_POOL[lane] == "actor" else self.critic_gpus

    @property
    def layout(self) -> str:
        if self.colocated:
            return f"one pool of {self.actor_gpus}" + ("" if self.split_metrics else " (stock)")
        shared = ", shared rollout" if self.shared_rollout or self.late_join else ""
        shared += " joined late" if self.late_join else ""
        deferred = ", critic update deferred" if self.deferred else ""
        return f"{self.actor_gpus} actor + {self.critic_gpus} critic{shared}{deferred}"

    def to_json(self) -> dict[str, Any]:
        def spread(value: Spread | None) -> dict[str, float] | None:
            return None if value is None else value.to_json()

        return {
            "path": self.path,
            "format": self.format,
            "layout": "colocated" if self.colocated else "split",
            "actor_pool_gpus": self.actor_gpus,
            "critic_pool_gpus": self.critic_gpus,
            "layout_source": self.layout_source,
            "cluster": None
            if self.cluster is None
            else {"nnodes": self.cluster.nnodes, "n_gpus_per_node": self.cluster.n_gpus_per_node},
            "steps": list(self.steps),
            "lanes_s": {name: spread.to_json() for name, spread in self.lanes.items()},
            "fixed_s": self.fixed.to_json(),
            "step_s": self.step.to_json(),
            "shared_rollout": self.shared_rollout,
            "critic_pool_rollout_share": spread(self.rollout_share),
            "shared_rollout_sync_s": spread(self.push),
            "weight_sync_s": spread(self.sync),
            "critic_update_deferred": self.deferred,
            "critic_update_hidden_s": spread(self.hidden),
            "critic_join_wait_s": spread(self.join_wait),
            "late_join": self.late_join,
            "critic_pool_joined": spread(self.joined),
            "critic_pool_join_s": spread(self.join_at),
            "shared_rollout_saved_estimate_s": spread(self.saved),
            "job_config_source": self.job_source or None,
            "kept_apart": {
                work.what: {
                    "timer": f"timing_s/{work.timer}",
                    "steps": list(work.steps),
                    "every_steps": work.every(),
                    "seconds": self.periodic_spread(work).to_json(),
                    "was_in_step_total": [n for n in work.steps if work.inside_total[n]],
                }
                for work in self.periodic
            },
            "notes": list(self.notes),
        }


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The training steps of one run's log, any format, one flat dict per step (``step`` included)."""
    return read_log(path).steps


def read_run(path: str | os.PathLike[str], cluster: Cluster) -> Run:
    """Read one run and the layout it trained on; raise AdviseError if it cannot be used."""
    log = read_log(path)
    name, steps = log.path, log.steps
    steady = steady_steps(steps)
    notes = list(log.notes)
    if len(steps) == 1:
        notes.append(f"only step {steps[0]['step']}, which pays one-off start-up costs: run a few more steps")
    job = job_config(log.config, log.text)
    try:
        view = None if job.config is None else job_from_config(job.config)  # the log's job, read once for all
    except PlacementError as exc:  # a value of another type: the run itself could not have used it as meant
        raise AdviseError(f"{name}: {job.source} cannot be read: {exc}") from exc
    layout: RunLayout = run_layout(name, steady[-1], view, cluster, job.source or CONFIG)
    notes += [*job.notes, *layout.notes]
    per_lane: dict[str, list[float]] = {lane: [] for lane in LANE_POOL}
    previous = {int(s["step"]): s for s in steps}
    late = [joined_late(step) and not layout.colocated for step in steady]
    gen_both, mixed = [], 0
    step_lanes = []  # each steady step's lanes, generation's included, for the streamed values' forecast
    for step in steady:
        before = previous.get(int(step["step"]) - 1, {})
        lanes = lane_times(step, number(before.get(JOIN_WAIT_S)))
        step_lanes.append(dict(lanes))
        if any(late) and "gen" in lanes:  # a late-join run: only steps on one pool size measure generation
            pools = generation_pools(step)
            if pools == "both":
                gen_both.append(lanes.pop("gen"))
            elif pools is None:
                lanes.pop("gen")
                mixed += 1
        for lane, value in lanes.items():
            per_lane[lane].append(value)
    missing = [LANE_MEANING[lane] for lane, times in per_lane.items() if not times and lane != "gen"]
    if missing and log.format == CSV:  # an export may hold only the columns someone picked
        notes.append(
            f"no {', '.join(missing)} column(s): those lanes are left out (a job without a critic has no critic "
            "lanes); export them if the run had them"
        )
    if not per_lane["gen"] and not gen_both and not mixed:
        raise AdviseError(
            f"{name} has no generation time (timing_s/gen) in steps {steady[0]['step']}-{steady[-1]['step']}: "
            "advise needs the timing_s/* metrics of verl's PPO trainer."
        )
    times = [phase_times(step) for step in steady]
    shares = values(steady, ROLLOUT_SHARE)
    pushes = [number(step.get(PUSH_S)) for step in steady]
    measured_pushes = [push for push in pushes if push is not None]
    # The push ran in verl's weight sync, which phase_times counts in 'other' (out of the fixed part), unless
    # the critic pool joined late: then it ran beside generation.
    on_path = [0.0 if is_late else (push or 0.0) for push, is_late in zip(pushes, late, strict=True)]
    fixed = [sum(t[p] for p in FIXED_PHASES) - push for t, push in zip(times, on_path, strict=True)]
    rollout_share = Spread.of_any(shares)
    joined, join_at, saved = values(steady, JOINED), values(steady, JOIN_S), values(steady, SAVED_S)
    if any(late):
        notes.append(
            f"shared rollout with the deferred critic update: the critic pool joined generation in "
            f"{sum(1 for v in joined if v > 0)} of {len(joined)} steps"
            + (f", {sum(join_at) / len(join_at):.2f} s after its start on average" if join_at else "")
            + (f", generated {100 * rollout_share.mean:.0f} % of the sequences" if rollout_share else "")
            + (f" and saved {sum(saved) / len(saved):.2f} s a step at the actor pool's rate" if saved else "")
            + f" (its estimate, {SAVED_S}, is not a measurement); generation is fitted from the steps on one pool "
            f"size only: {len(per_lane['gen'])} on the actor pool's {layout.actor_gpus} GPUs, {len(gen_both)} on "
            f"both pools' {layout.actor_gpus + layout.critic_gpus}, {mixed} joined part-way and left out"
        )
    elif rollout_share is not None and rollout_share.mean > 0 and not layout.colocated:
        even = layout.critic_gpus / (layout.actor_gpus + layout.critic_gpus)
        notes.append(
            f"shared rollout: the critic pool generated {100 * rollout_share.mean:.0f} % of the sequences "
            f"({100 * even:.0f} % would be an even spread over the GPUs); its generation counts as on all "
            f"{layout.actor_gpus + layout.critic_gpus} GPUs"
        )
    notes += tail_notes(steady)
    if not layout.colocated:
        walls = [t["step"] for t in times]
        notes += stream_notes(steady, step_lanes, walls, layout.actor_gpus, layout.critic_gpus)
    syncs = [
        max(v - push, 0.0) for s, push in zip(steady, on_path, strict=True) if (v := number(s.get(SYNC_S))) is not None
    ]
    waits, hidden = values(steady, JOIN_WAIT_S), values(steady, HIDDEN_S)
    return Run(
        path=name,
        actor_gpus=layout.actor_gpus,
        critic_gpus=layout.critic_gpus,
        colocated=layout.colocated,
        split_metrics=layout.split_metrics,
        steps=tuple(int(step["step"]) for step in steady),
        first_step=int(steps[0]["step"]),
        lanes={lane: Spread.of(times) for lane, times in per_lane.items() if times},
        fixed=Spread.of([max(value, 0.0) for value in fixed]),
        step=Spread.of([t["step"] for t in times]),
        notes=tuple(notes),
        rollout_share=rollout_share,
        push=Spread.of_any(measured_pushes),
        format=log.format,
        cluster=layout.cluster,
        layout_source=layout.pools_source,
        cluster_source=layout.cluster_source,
        sync=Spread.of_any(syncs),
        hidden=Spread.of_any(hidden),
        join_wait=Spread.of_any(waits),
        late_join=any(late),
        joined=Spread.of_any(joined),
        join_at=Spread.of_any(join_at),
        saved=Spread.of_any(saved),
        periodic=tuple(log.periodic),
        job_config=job.config,
        job=view,
        job_source=job.source,
        max_reserved_gb=max(values(steps, RESERVED_GB), default=None),
        gen_both=Spread.of_any(gen_both),
        model_shape=model_shape(log.text),
        mean_tokens=mean_tokens(steady),
    )


# -- one step's lanes and metrics ------------------------------------------------------------
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

    A mixed step's ``timing_s/gen`` is neither pool size's time. ``split/shared_rollout_saved_estimate_s``, which would
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


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
