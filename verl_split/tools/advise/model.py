"""The cost model of ``verl-split advise``: a PPO step's time under a placement, from measured runs.

Composition (HybridFlow's ``d_cost``, EuroSys'25 §6, with the overlaps verl-split performs):

* phases on the same pool add up; pools working at the same time take the maximum; stages add up;
* a step is generation, then preparation, then the updates, plus a ``fixed`` part
  (reward, advantages, weight sync, the rest), held equal under every placement;
* colocated (``all``, one pool of N GPUs)::

      gen(N) + [old_log_prob+ref](N) + values(N) + actor_update(N) + critic_update(N) + fixed

* split (actor pool of A GPUs, critic pool of C)::

      gen(A) + max([old_log_prob+ref](A), values(C)) + max(actor_update(A), critic_update(C)) + fixed

  Generation runs on the actor pool only, so the critic pool idles through it. An overlap switched off
  (``VERL_SPLIT_OVERLAP``) turns its ``max`` into a sum.

* split with shared rollout (rollout replicas on the critic pool too, :mod:`verl_split.tools.advise.variants`)::

      gen(A + C) + max(...) + max(...) + fixed + weight push + critic offload

* split with the critic's update deferred into the next step (:mod:`verl_split.tools.advise.variants`)::

      gen(A) + max([old_log_prob+ref](A), excess + values(C)) + actor_update(A) + fixed
      excess = max(0, critic_update(C) - (actor_update(A) + weight sync + gen(A)))

* split with both (:mod:`verl_split.tools.advise.variants`): the actor pool generates at once, the critic
  pool joins when the rest of its update and the push are done, ``j = max(0, e - sync) + push`` into
  generation with ``e = max(0, critic_update(C) - actor_update(A))``::

      gen = gen(A) if gen(A) <= j else j + (1 - j / gen(A)) x gen(A + C)
      gen + prep(what is left of the critic's update, if it never joined) + actor_update(A) + fixed

Scaling of each lane (one pool's work in one phase) with its pool's GPU count ``n``:
``t(n) = serial + parallel / n`` (Amdahl), fitted by least squares in ``1/n`` when the runs show the lane
at two or more pool sizes. With one size only, linear scaling is *assumed* (``serial = 0``): the output says
so and names the run that would replace the assumption. Under linear scaling colocating everything is never
slower than a split (the split only moves work around and leaves GPUs idle); a split wins when lanes scale
sublinearly, as HybridFlow measured at 96-128 GPUs or with a large critic.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.tools.advise.runs import LANE_POOL, LANES, AdviseError, Run
from verl_split.tools.advise.variants import DeferralCosts, DeferredCritic, LateJoinStep, SharedRolloutCosts, defer

#: The overlaps verl-split performs with ``VERL_SPLIT_OVERLAP=on`` (the default).
OVERLAPS = frozenset({"updates", "prep"})

FIT_AMDAHL = "fitted"
FIT_LINEAR = "linear scaling assumed"


@dataclass(frozen=True)
class LaneModel:
    """One lane's time as a function of its pool's GPU count: ``serial + parallel / n``."""

    lane: str
    serial_s: float
    parallel_s: float
    fit: str  # FIT_AMDAHL or FIT_LINEAR
    points: tuple[tuple[int, float], ...]  # (pool GPUs, mean seconds) per run

    def time(self, gpus: int) -> float:
        return self.serial_s + self.parallel_s / gpus

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted({n for n, _ in self.points}))

    def to_json(self) -> dict[str, Any]:
        return {
            "pool": LANE_POOL[self.lane],
            "serial_s": self.serial_s,
            "parallel_s": self.parallel_s,
            "fit": self.fit,
            "measured": [{"gpus": n, "mean_s": t} for n, t in self.points],
        }


def fit_lane(lane: str, points: Sequence[tuple[int, float]]) -> LaneModel:
    """Amdahl's ``serial + parallel / n`` through the points; linear scaling when they share one ``n``."""
    if not points:
        raise ValueError(f"no measurement of {lane}")
    sizes = {n for n, _ in points}
    if len(sizes) == 1:
        n = points[0][0]
        mean = sum(t for _, t in points) / len(points)
        return LaneModel(lane, 0.0, mean * n, FIT_LINEAR, tuple(points))
    xs = [1.0 / n for n, _ in points]
    ts = [t for _, t in points]
    x_mean, t_mean = sum(xs) / len(xs), sum(ts) / len(ts)
    slope = sum((x - x_mean) * (t - t_mean) for x, t in zip(xs, ts, strict=True)) / sum((x - x_mean) ** 2 for x in xs)
    serial = t_mean - slope * x_mean
    if slope < 0.0:  # slower with more GPUs: no parallel part seen
        serial, slope = t_mean, 0.0
    elif serial < 0.0:  # better than linear: the best fit through the origin
        serial, slope = 0.0, sum(x * t for x, t in zip(xs, ts, strict=True)) / sum(x * x for x in xs)
    return LaneModel(lane, serial, slope, FIT_AMDAHL, tuple(points))


@dataclass(frozen=True)
class CostModel:
    """Every lane's model, the fixed part of the step, and how sure the model is of each."""

    lanes: dict[str, LaneModel]
    fixed_s: float

    @property
    def has_critic(self) -> bool:
        return "critic_update" in self.lanes or "critic_prep" in self.lanes

    def assumed(self) -> list[str]:
        """The lanes whose scaling is assumed, not fitted."""
        return [lane for lane, model in self.lanes.items() if model.fit == FIT_LINEAR]

    def lane_time(self, lane: str, gpus: int, colocated: bool = False) -> float:
        model = self.lanes.get(lane)
        if model is None:
            return 0.0
        # generation.GenerationLane: its KV room depends on what else the pool holds (the critic, colocated)
        return model.time(gpus, colocated) if lane == "gen" and hasattr(model, "choose") else model.time(gpus)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": "gen + prep + updates + fixed; colocated phases add up, split pools take the maximum; "
            "shared rollout: gen on actor + critic GPUs, plus the weight push and the critic offload; "
            "deferred critic update: updates = actor_update, prep = max(old_log_prob+ref, excess + values), "
            "excess = max(0, critic_update - (actor_update + weight sync + gen)); both: the critic pool joins "
            "generation at j = max(0, critic_update - actor_update - weight sync) + push, gen = gen(A) if gen(A) "
            "<= j else j + (1 - j / gen(A)) x gen(A + C), updates = actor_update",
            "lane_time": "serial_s + parallel_s / pool GPUs",
            "lanes": {lane: model.to_json() for lane, model in self.lanes.items()},
            "fixed_s": self.fixed_s,
        }


def build_model(runs: Sequence[Run]) -> CostModel:
    """Fit every lane the runs measured, on the pool size each run gave it; the fixed part is their mean."""
    lanes = {}
    for lane, _, _ in LANES:
        points = [(run.gpus_of(lane), run.lanes[lane].mean) for run in runs if lane in run.lanes]
        if lane == "gen":  # a late-join run's steps with both pools there from the start
            points += [(run.actor_gpus + run.critic_gpus, run.gen_both.mean) for run in runs if run.gen_both]
        if points:
            lanes[lane] = fit_lane(lane, points)
    if "gen" not in lanes:
        raise AdviseError(
            "no run measured generation on one pool size: every step of the late-join runs had the critic pool join "
            "part-way (split/shared_rollout_saved_estimate_s, which would convert it, is an estimate, not a "
            "measurement). "
            "Add a stock run or a split run without shared rollout."
        )
    fixed = sum(run.fixed.mean for run in runs) / len(runs)
    return CostModel(lanes=lanes, fixed_s=fixed)


@dataclass(frozen=True)
class Prediction:
    """One layout's predicted step: each phase's wall time, each lane's time, each pool's idle share."""

    actor_gpus: int
    critic_gpus: int
    colocated: bool
    phases: dict[str, float]  # report.PHASES names; the fixed part is all in 'other'
    lanes: dict[str, float]
    step_s: float
    idle_share: dict[str, float]  # pool ('actor', 'critic'; one 'global' when colocated) -> share of the step
    #: Set when the critic pool generates too (shared rollout): what that adds to the step, and why.
    shared: SharedRolloutCosts | None = None
    #: Set when the critic's update is deferred into the next step: what hides and what is waited for.
    deferred: DeferredCritic | None = None
    #: Set with both (shared rollout and the deferral): the critic pool joins generation late.
    late: LateJoinStep | None = None
    #: The overlaps the step was predicted with (``VERL_SPLIT_OVERLAP``'s phases; the deferral is ``deferred``).
    overlaps: frozenset[str] = OVERLAPS

    @property
    def actor_busy_s(self) -> float:
        """The actor pool's lanes (generation included)."""
        return sum(t for lane, t in self.lanes.items() if LANE_POOL[lane] == "actor")

    @property
    def critic_busy_s(self) -> float:
        """The critic pool's own lanes (without shared rollout's generation)."""
        return sum(t for lane, t in self.lanes.items() if LANE_POOL[lane] == "critic")


def predict(
    model: CostModel,
    actor_gpus: int,
    critic_gpus: int,
    colocated: bool,
    overlaps: Collection[str] = OVERLAPS,
    shared: SharedRolloutCosts | None = None,
    deferral: DeferralCosts | None = None,
) -> Prediction:
    """The step's time on this layout (``critic_gpus`` is ignored when colocated: one pool).

    ``shared``: the critic pool generates too (a split only), at these push and offload costs.
    ``deferral``: the critic's update runs on into the next step (a split with a critic update only).
    Both, where the critic's update outlasts the actor's: the critic pool joins generation late
    (:class:`verl_split.tools.advise.variants.LateJoinStep`); elsewhere nothing runs on at the sync, as ``shared``
    alone.
    """
    if colocated:
        critic_gpus, shared = actor_gpus, None
    lanes = {
        lane: model.lane_time(lane, actor_gpus if LANE_POOL[lane] == "actor" else critic_gpus, colocated)
        for lane in model.lanes
    }
    if shared is not None and deferral is not None:
        if lanes.get("critic_update", 0.0) > lanes.get("actor_update", 0.0) and lanes.get("gen", 0.0) > 0:
            return _late_join(model, lanes, actor_gpus, critic_gpus, overlaps, shared, deferral)
        deferral = None  # the critic's update is done by the sync: shared rollout alone
    if shared is not None and "gen" in lanes:
        # Every GPU generates. The lane's serial part (the long tail) stays: the saving is at most
        # gen(A) x C / (A + C), reached only when generation scales linearly.
        lanes["gen"] = model.lane_time("gen", actor_gpus + critic_gpus)
    added = 0.0 if shared is None else shared.added_s

    def stage(actor_lane: str, critic_lane: str, overlap: str) -> float:
        a, c = lanes.get(actor_lane, 0.0), lanes.get(critic_lane, 0.0)
        return max(a, c) if not colocated and overlap in overlaps else a + c

    gen = lanes.get("gen", 0.0)
    prep = stage("actor_prep", "critic_prep", "prep")
    updates = stage("actor_update", "critic_update", "updates")
    deferred = None
    if deferral is not None and not colocated and shared is None and "critic_update" in lanes:
        prep, updates, deferred = defer(
            lanes.get("actor_update", 0.0),
            lanes["critic_update"],
            gen,
            deferral.sync_s,
            lanes.get("actor_prep", 0.0),
            lanes.get("critic_prep", 0.0),
            prep="prep" in overlaps,
        )
    # The push and the offload run between the phases, on the critical path: they count in 'other'.
    step = gen + prep + updates + model.fixed_s + added
    other = model.fixed_s + added
    phases = {"gen": gen, "reward": 0.0, "prep": prep, "adv": 0.0, "updates": updates, "other": other}
    actor_busy = sum(t for lane, t in lanes.items() if LANE_POOL[lane] == "actor")
    critic_busy = sum(t for lane, t in lanes.items() if LANE_POOL[lane] == "critic")
    if shared is not None:
        critic_busy += gen + shared.offload_s
    if colocated:
        idle = {"global": _idle(actor_busy + critic_busy, step)}
    else:
        idle = {"actor": _idle(actor_busy, step), "critic": _idle(critic_busy, step)}
    return Prediction(
        actor_gpus, critic_gpus, colocated, phases, lanes, step, idle, shared, deferred, overlaps=frozenset(overlaps)
    )


def _late_join(
    model: CostModel,
    lanes: dict[str, float],
    actor_gpus: int,
    critic_gpus: int,
    overlaps: Collection[str],
    shared: SharedRolloutCosts,
    deferral: DeferralCosts,
) -> Prediction:
    """A split step with shared rollout and the deferral both on: the critic pool joins generation late."""
    late = LateJoinStep(
        actor_update_s=lanes.get("actor_update", 0.0),
        critic_update_s=lanes["critic_update"],
        gen_alone_s=lanes["gen"],
        gen_both_s=model.lane_time("gen", actor_gpus + critic_gpus),
        sync_s=deferral.sync_s,
        push_s=shared.push_s or 0.0,  # not known: 0, the step a lower bound (the row is not ranked)
        offload_s=shared.offload_s,
        actor_prep_s=lanes.get("actor_prep", 0.0),
        critic_prep_s=lanes.get("critic_prep", 0.0),
        prep_overlap="prep" in overlaps,
        fixed_s=model.fixed_s,
    )
    lanes = {**lanes, "gen": late.gen_s}  # the actor pool generates throughout
    phases = {
        "gen": late.gen_s,
        "reward": 0.0,
        "prep": late.prep_s,
        "adv": 0.0,
        "updates": late.actor_update_s,
        "other": model.fixed_s + late.added_s,
    }
    actor_busy = sum(t for lane, t in lanes.items() if LANE_POOL[lane] == "actor")
    critic_busy = sum(t for lane, t in lanes.items() if LANE_POOL[lane] == "critic")
    if late.joined:
        critic_busy += late.gen_s - late.join_s + late.push_s + late.offload_s
    step = late.step_s
    idle = {"actor": _idle(actor_busy, step), "critic": _idle(critic_busy, step)}
    overlaps = frozenset(overlaps)
    return Prediction(actor_gpus, critic_gpus, False, phases, lanes, step, idle, shared, None, late, overlaps)


def _idle(busy: float, step: float) -> float:
    return min(max(1.0 - busy / step, 0.0), 1.0) if step > 0 else 0.0
