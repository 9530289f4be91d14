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
   the overlap.

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
that follows (``overlap._Step.finish``); the design memo with verl's file:line is
``shared/research/compute_overlap.md`` in the project's workspace.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl_split import deferred_critic, overlap, settings
from verl_split.errors import PrepFailedError, UpdateFailedError
from verl_split.trainers import V0Prep, batch_arg, defining_class

logger = logging.getLogger("verl_split.prep")

# The attribute a trainer carries from the step's first actor-side call to its values call.
_STEP_ATTR = "_verl_split_prep"
# The finished step's metrics, until the update phase reports them (see take_metrics).
_METRICS_ATTR = "_verl_split_prep_metrics"
# Set on the controller thread, so its own call to _compute_values passes straight through.
_controller = threading.local()

#: The stock methods the overlap moves in time; a trainer overriding one of them runs stock.
PREP_METHODS = ("_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values")


@dataclass
class _PrepStep:
    """One step's preparation: old_log_prob + ref on the actor's pool, values on the critic's."""

    trainer: Any
    adapter: Any
    actor_pool: str | None
    critic_pool: str | None
    batch: Any  # the batch of the step's first call: the reward model's, or old_log_prob's
    may_overlap: bool = False  # decided once per step, see _why_sequential
    overlapped: bool = False  # a lane was started on a controller thread
    actor: overlap._Interval = field(default_factory=overlap._Interval)
    actor_busy_s: float = 0.0  # old_log_prob + ref, summed
    critic: overlap._Interval = field(default_factory=overlap._Interval)
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
        # A daemon thread, not an executor: a failed step must not keep the process from exiting.
        threading.Thread(
            target=self._run_values, args=(call_args, call_kwargs), name="verl-split-values", daemon=True
        ).start()

    def _run_values(self, args: tuple, kwargs: dict) -> None:
        _controller.active = True
        started = 0.0
        try:
            # The previous step's critic update, if it runs on, comes first; its wait is not values' time.
            deferred_critic.join("values")
            started = self.critic_started()
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
        threading.Thread(
            target=self._run_actor_lane, args=(snapshot,), name="verl-split-actor-prep", daemon=True
        ).start()

    def _run_actor_lane(self, snapshot: Any) -> None:
        _controller.active = True
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
        lanes = [lane for lane in (self.actor, self.critic) if lane.end]
        if not lanes:
            return {}
        wall = max(lane.end for lane in lanes) - min(lane.start for lane in lanes)
        shared = 0.0
        if self.actor.end and self.critic.end:
            shared = max(0.0, min(self.actor.end, self.critic.end) - max(self.actor.start, self.critic.start))
        return {
            "split/prep_actor_s": self.actor_busy_s,
            "split/prep_critic_s": self.critic_busy_s,
            "split/prep_wall_s": wall,
            "split/prep_overlap_s": shared,
            # 1 only when both lanes were really in flight at once.
            "split/prep_overlapped": float(self.overlapped and shared > 0.0),
        }

    def finish(self) -> None:
        metrics = self.metrics()
        if not metrics:
            return
        if self.overlapped:
            logger.info(
                "Preparation: old_log_prob + ref %.1fs, %s %.1fs, wall %.1fs, overlap %.1fs",
                metrics["split/prep_actor_s"],
                "reward model + values" if self.early else "values",
                metrics["split/prep_critic_s"],
                metrics["split/prep_wall_s"],
                metrics["split/prep_overlap_s"],
            )
        vars(self.trainer).setdefault(_METRICS_ATTR, {}).update(metrics)
        n = self.trainer.global_steps
        if self.actor.end:
            overlap.record_interval(f"old_log_prob + ref (step {n})", f"actor pool: {self.actor_pool}", self.actor)
        if self.critic.end:
            name = "reward model + values" if self.early else "values"
            overlap.record_interval(f"{name} (step {n})", f"critic pool: {self.critic_pool}", self.critic)


def take_metrics(trainer: Any) -> dict[str, float]:
    """The ``split/prep_*`` metrics of the trainer's last preparation, once."""
    return vars(trainer).pop(_METRICS_ATTR, {})


_warned: set[str] = set()


def _why_sequential(trainer: Any, adapter: Any, actor_pool: str | None, critic_pool: str | None) -> str:
    """Empty when this step's preparation may overlap, else the reason it runs one phase after the other."""
    if not settings.current().overlap_prep:
        return "VERL_SPLIT_OVERLAP does not include prep"
    if not adapter.runs_stock_step(trainer):
        return f"{type(trainer).__name__} overrides {adapter.step_method}(), so the order of its phases is unknown"
    for method in PREP_METHODS:
        owner = defining_class(type(trainer), method)
        if owner is not adapter.trainer_class:
            return f"{owner.__name__} overrides {method}()"
    if actor_pool is None or actor_pool == critic_pool:
        return f"actor and critic share resource pool {critic_pool!r}"
    return adapter.why_not(trainer)


def _log_once(
    reason: str, what: str = "Preparation (old_log_prob, ref, values) runs one phase after the other"
) -> None:
    if reason not in _warned:
        _warned.add(reason)
        logger.info("%s: %s.", what, reason)


def _new_step(trainer: Any, adapter: Any, batch: Any) -> _PrepStep:
    actor_pool, critic_pool = adapter.pools(trainer)
    step = _PrepStep(trainer, adapter, actor_pool, critic_pool, batch)
    reason = _why_sequential(trainer, adapter, actor_pool, critic_pool)
    step.may_overlap = not reason
    if reason:
        _log_once(reason)
    return step


def make_reward_wrapper(adapter: V0Prep) -> Callable[..., Any]:
    """For ``RayPPOTrainer._compute_reward_colocate``: start old_log_prob + ref beside the reward model."""

    def _wrap_compute_reward_colocate(wrapped, trainer, args, kwargs):
        batch = batch_arg(args, kwargs)
        if getattr(_controller, "active", False) or not getattr(trainer, "use_critic", False):
            return wrapped(*args, **kwargs)
        if not adapter.is_step_reward(batch):
            return wrapped(*args, **kwargs)
        step = _new_step(trainer, adapter, batch)
        if adapter.reward_pool(trainer) == step.critic_pool:
            deferred_critic.join("the reward model on the critic's pool")
        if step.may_overlap:
            reason = adapter.why_not_during_reward(trainer, step.actor_pool)
            if reason:
                _log_once(reason, "The reward model runs before old_log_prob and ref")
            else:
                step.launch_actor_lane(adapter.actor_methods(trainer))
        setattr(trainer, _STEP_ATTR, step)
        started = step.critic_started()
        try:
            result = wrapped(*args, **kwargs)
        except Exception as exc:
            step.aborted = True  # the actor's lane calls no more workers
            vars(trainer).pop(_STEP_ATTR, None)
            if step.early:
                raise step.failure("critic", "reward model", exc) from exc
            raise
        step.critic_ended(started)
        return result

    return _wrap_compute_reward_colocate


def make_actor_compute_wrapper(adapter: Any) -> Callable[..., Any]:
    """For ``_compute_old_log_prob`` and ``_compute_ref_log_prob``: launch values at the first, time both."""

    def _wrap_actor_compute(wrapped, trainer, args, kwargs):
        if getattr(_controller, "active", False):
            return wrapped(*args, **kwargs)  # the actor's lane beside the reward model
        if not getattr(trainer, "use_critic", False):
            _log_once("this run has no critic (e.g. GRPO)")
            return wrapped(*args, **kwargs)
        deferred_critic.raise_if_failed()  # a deferred critic update that failed during generation
        batch = batch_arg(args, kwargs)
        step: _PrepStep | None = vars(trainer).get(_STEP_ATTR)
        if step is None or not adapter.same_batch(step.batch, batch):
            if step is not None:
                step.aborted = True  # a step that never reached values: never joined
            step = _new_step(trainer, adapter, batch)
            setattr(trainer, _STEP_ATTR, step)
        if step.may_overlap and step.values_future is None:
            step.launch_values(args, kwargs)  # the critic's pool is free: no reward model, or it is done
        if wrapped.__name__ in step.early:
            try:
                step.raise_if_values_failed()
                return step.take_early(wrapped.__name__)
            except PrepFailedError:
                vars(trainer).pop(_STEP_ATTR, None)
                raise
        started = time.monotonic()
        step.actor.start = step.actor.start or started
        try:
            step.raise_if_values_failed()  # fail fast, before more work on the actor's pool
            result = wrapped(*args, **kwargs)
        except PrepFailedError:
            vars(trainer).pop(_STEP_ATTR, None)
            raise
        except Exception as exc:
            step.aborted = True
            vars(trainer).pop(_STEP_ATTR, None)
            if step.overlapped:
                raise step.failure("actor", wrapped.__name__.removeprefix("_compute_"), exc) from exc
            raise
        step.actor.end = time.monotonic()
        step.actor_busy_s += step.actor.end - started
        return result

    return _wrap_actor_compute


def make_values_wrapper(adapter: Any) -> Callable[..., Any]:
    """For ``_compute_values``: join the values launched at old_log_prob, or run them here, timed."""

    def _wrap_compute_values(wrapped, trainer, args, kwargs):
        if getattr(_controller, "active", False):
            return wrapped(*args, **kwargs)  # the launched call itself
        step: _PrepStep | None = vars(trainer).pop(_STEP_ATTR, None)
        batch = batch_arg(args, kwargs)
        if step is not None and step.values_future is not None:
            if not adapter.same_batch(step.batch, batch):
                step.aborted = True
                raise RuntimeError(
                    "verl-split: _compute_values was called with another batch than the values it started; "
                    "please report this with your verl version and trainer."
                )
            result = adapter.values_result(step, step.join_values(), args, kwargs)
        else:
            if step is None:  # no actor-side call this step (bypass mode without ref)
                actor_pool, critic_pool = adapter.pools(trainer)
                step = _PrepStep(trainer, adapter, actor_pool, critic_pool, batch)
            deferred_critic.join("values")  # the previous step's critic update, if it runs on
            started = step.critic_started()
            result = wrapped(*args, **kwargs)
            step.critic_ended(started)
        step.finish()
        return result

    return _wrap_compute_values
