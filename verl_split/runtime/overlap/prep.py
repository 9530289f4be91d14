"""Compute the critic's values beside the actor's old_log_prob + ref (verl issue 324).

In each step with a critic, stock verl prepares the experience one phase after the other:
``_compute_old_log_prob`` and ``_compute_ref_log_prob`` on the actor's pool, then
``_compute_values`` on the critic's. None reads another's output, so under split placement
values can run while the actor pool works. verl-split keeps the three stock methods and
changes only *when* values runs:

1. At the entry of the step's first actor-side call (``_compute_old_log_prob``, or
   ``_compute_ref_log_prob`` in verl's bypass mode), the batch is final (balanced, reward
   merged). A private snapshot of it is taken -- stock code mutates the batch in place
   (``DataProto.union`` in ``RayPPOTrainer.fit``, ``extra_info`` in v1) -- and the stock
   ``_compute_values`` starts on it on a controller thread.
2. The trainer's thread runs the stock old_log_prob and ref as they are. At ref's entry, a
   values call that already failed is raised at once.
3. The stock call to ``_compute_values`` that follows joins the thread and returns what the
   stock call returns; ``fit`` merges it at its stock place, so every mutation of the
   step's batch keeps its stock order and the numbers are those of the same run without
   the updates.

``RayPPOTrainer`` with a reward model colocated on the critic's pool runs it in the step,
before old_log_prob. There the actor's lane starts earlier: at the entry of the step's stock
``_compute_reward_colocate``, old_log_prob and ref start on a snapshot on a controller
thread; the reward model runs on the trainer's thread; the stock ``_compute_old_log_prob``
and ``_compute_ref_log_prob`` calls that follow return what the thread computed, and values
starts at the first of them (the critic's pool is free again). Both are pure functions of
the batch's rollout fields, which the reward model does not change. verl's v1 trainer runs
the reward model before balancing the batch, whose padding copies the reward's fields, so
there the reward model keeps its place.

When it must not overlap (a single pool, no critic, a trainer that overrides the step or
these methods, v1 with the reference inside a LoRA actor, ``VERL_SPLIT_OVERLAP`` without
``prep``), the three calls run one after the other, still timed, and one log line names
the reason. The step's ``split/prep_*`` metrics reach verl's tracker through the update
that follows (``updates._Step.finish``); the design memo with verl's file:line is
``shared/research/compute_overlap.md`` in the project's workspace.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from verl_split.core import metric_names as names
from verl_split.core.errors import PrepFailedError, UpdateFailedError
from verl_split.runtime.overlap import deferral, lanes
from verl_split.runtime.overlap.lanes import Interval

logger = logging.getLogger("verl_split.prep")

# The attribute a trainer carries from the step's first actor-side call to its values call.
STEP_ATTR = "_verl_split_prep"
# A controller thread's own calls of the three methods pass straight through (lanes.passthrough).
PREP_LANE = "prep_lane"

#: The stock methods the overlap moves in time; a trainer overriding one of them runs stock.
PREP_METHODS = ("_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values")


@dataclass
class PrepStep:
    """One step's preparation: old_log_prob + ref on the actor's pool, values on the critic's."""

    trainer: Any
    adapter: Any
    actor_pool: str | None
    critic_pool: str | None
    batch: Any  # the batch of the step's first call: the reward model's, or old_log_prob's
    may_overlap: bool = False  # decided once per step, see _why_sequential
    overlapped: bool = False  # a lane was started on a controller thread
    actor: Interval = field(default_factory=Interval)
    actor_busy_s: float = 0.0  # old_log_prob + ref, summed
    critic: Interval = field(default_factory=Interval)
    critic_busy_s: float = 0.0  # reward model + values, summed
    early: dict[str, concurrent.futures.Future] = field(default_factory=dict)  # actor calls run beside the RM
    snapshot: Any = None
    extra_info_before: dict = field(default_factory=dict)
    values_future: concurrent.futures.Future | None = None
    aborted: bool = False

    # -- the critic's lane, on a controller thread ---------------------------------------
    def launch_values(self, args: tuple, kwargs: dict) -> None:
        self.snapshot = self.adapter.snapshot(self.batch)
        self.extra_info_before = dict(getattr(self.snapshot, "extra_info", None) or {})
        call_args, call_kwargs = self.adapter.values_call(self.snapshot, args, kwargs)
        self.values_future = concurrent.futures.Future()
        self.overlapped = True
        logger.info(
            "Starting values on %s beside old_log_prob and ref on %s (step %s)",
            self.critic_pool,
            self.actor_pool,
            self.trainer.global_steps,
        )
        lanes.start_lane("verl-split-values", lambda: self._run_values(call_args, call_kwargs))

    def _run_values(self, args: tuple, kwargs: dict) -> None:
        started = 0.0
        try:
            # The previous step's critic update, if it runs on, comes first; its wait is not values' time.
            deferral.join("values")
            started = self.critic_started()
            with lanes.passthrough(PREP_LANE):
                result = self.trainer._compute_values(*args, **kwargs)
        except BaseException as exc:  # handed to the trainer's thread, which raises it
            if started:
                self.critic_ended(started)
            self.values_future.set_exception(exc)
        else:
            self.critic_ended(started)
            self.values_future.set_result(result)

    def critic_started(self) -> float:
        started = time.monotonic()
        self.critic.start = self.critic.start or started
        return started

    def critic_ended(self, started: float) -> None:
        self.critic.end = time.monotonic()
        self.critic_busy_s += self.critic.end - started

    # -- the actor's lane beside the reward model, on a controller thread ----------------
    def launch_actor_lane(self, methods: list[str]) -> None:
        snapshot = self.adapter.snapshot(self.batch)
        self.early = {method: concurrent.futures.Future() for method in methods}
        self.overlapped = True
        logger.info(
            "Starting old_log_prob and ref on %s beside the reward model on %s (step %s)",
            self.actor_pool,
            self.critic_pool,
            self.trainer.global_steps,
        )
        lanes.start_lane("verl-split-actor-prep", lambda: self._run_actor_lane(snapshot))

    def _run_actor_lane(self, snapshot: Any) -> None:
        with lanes.passthrough(PREP_LANE):
            self._run_actor_calls(snapshot)

    def _run_actor_calls(self, snapshot: Any) -> None:
        for method, future in list(self.early.items()):
            if self.aborted:  # the reward model failed: call no more workers
                future.set_exception(RuntimeError("the step was aborted"))
                continue
            started = time.monotonic()
            self.actor.start = self.actor.start or started
            try:
                result = getattr(self.trainer, method)(snapshot)
            except BaseException as exc:
                self.aborted = True
                future.set_exception(exc)
                continue
            finally:
                self.actor.end = time.monotonic()
                self.actor_busy_s += self.actor.end - started
            future.set_result(result)

    def take_early(self, method: str) -> Any:
        """The result of an actor call that ran beside the reward model."""
        try:
            return self.early.pop(method).result()
        except Exception as exc:
            self.aborted = True
            raise self.failure("actor", method.removeprefix("_compute_"), exc) from exc

    def raise_if_values_failed(self) -> None:
        future = self.values_future
        if future is not None and future.done() and future.exception() is not None:
            self.join_values()

    def join_values(self) -> Any:
        try:
            return self.values_future.result()
        except UpdateFailedError:  # the previous step's deferred critic update: it names itself
            self.aborted = True
            raise
        except Exception as exc:
            self.aborted = True
            raise self.failure("critic", "values", exc) from exc

    def failure(self, role: str, phase: str, exc: BaseException) -> PrepFailedError:
        if role == "critic":
            pool, other = self.critic_pool, "old_log_prob and ref"
        else:
            pool, other = self.actor_pool, "values" if self.values_future else "the reward model"
        return PrepFailedError(
            f"the {role}'s {phase} failed on resource pool {pool!r} (step {self.trainer.global_steps}) while {other} "
            f"ran on the other pool: {type(exc).__name__}: {exc}. The run stops here. To tell the two apart, rerun "
            f"with VERL_SPLIT_OVERLAP=updates (preparation one phase after the other)."
        )

    # -- after all three -------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        ran = [lane for lane in (self.actor, self.critic) if lane.end]
        if not ran:
            return {}
        wall = max(lane.end for lane in ran) - min(lane.start for lane in ran)
        shared = lanes.shared_seconds(self.actor, self.critic) if self.actor.end and self.critic.end else 0.0
        return {
            names.PREP_ACTOR_S: self.actor_busy_s,
            names.PREP_CRITIC_S: self.critic_busy_s,
            names.PREP_WALL_S: wall,
            names.PREP_OVERLAP_S: shared,
            # 1 only when both lanes were really in flight at once.
            names.PREP_OVERLAPPED: float(self.overlapped and shared > 0.0),
        }

    def finish(self) -> None:
        metrics = self.metrics()
        if not metrics:
            return
        if self.overlapped:
            logger.info(
                "Preparation: old_log_prob + ref %.1fs, %s %.1fs, wall %.1fs, overlap %.1fs",
                metrics[names.PREP_ACTOR_S],
                "reward model + values" if self.early else "values",
                metrics[names.PREP_CRITIC_S],
                metrics[names.PREP_WALL_S],
                metrics[names.PREP_OVERLAP_S],
            )
        lanes.hand_over_metrics(self.trainer, metrics)
        n = self.trainer.global_steps
        if self.actor.end:
            lanes.record_interval(f"old_log_prob + ref (step {n})", f"actor pool: {self.actor_pool}", self.actor)
        if self.critic.end:
            name = "reward model + values" if self.early else "values"
            lanes.record_interval(f"{name} (step {n})", f"critic pool: {self.critic_pool}", self.critic)
