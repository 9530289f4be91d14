"""The preparation overlap's wrappers of verl's ``_compute_*`` methods (``seams.py`` names them).

How they cooperate, and the step they coordinate: ``prep.py``. Here: per step, whether the preparation
may overlap, and the calls: values launched at the step's first actor-side call, joined at the stock
``_compute_values``; old_log_prob and ref launched beside a reward model on the critic's pool.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from verl_split.core import log, settings
from verl_split.core.errors import PrepFailedError
from verl_split.runtime.overlap import deferral, lanes
from verl_split.runtime.overlap.prep import PREP_LANE, PREP_METHODS, STEP_ATTR, PrepStep
from verl_split.runtime.overlap.trainers import V0Prep, batch_arg, defining_class

logger = logging.getLogger("verl_split.prep")


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
    ref_pool = adapter.ref_pool(trainer)
    if ref_pool is not None and ref_pool != actor_pool:
        # Values on a controller thread and ref on the trainer's would reach the same worker processes (one
        # WorkerDict per GPU) from two threads: their ranks could take the two calls in different orders.
        return (
            f"the reference runs beside the critic on resource pool {ref_pool!r}, whose workers take one call at "
            "a time, so values and ref cannot run beside old_log_prob in a fixed order on every rank"
        )
    return adapter.why_not(trainer)


def _log_once(
    reason: str, what: str = "Preparation (old_log_prob, ref, values) runs one phase after the other"
) -> None:
    log.once(logger, f"{what}: {reason}.")


def _new_step(trainer: Any, adapter: Any, batch: Any) -> PrepStep:
    actor_pool, critic_pool = adapter.pools(trainer)
    step = PrepStep(trainer, adapter, actor_pool, critic_pool, batch)
    reason = _why_sequential(trainer, adapter, actor_pool, critic_pool)
    step.may_overlap = not reason
    if reason:
        _log_once(reason)
    return step


def make_reward_wrapper(adapter: V0Prep) -> Callable[..., Any]:
    """For ``RayPPOTrainer._compute_reward_colocate``: start old_log_prob + ref beside the reward model."""

    def _wrap_compute_reward_colocate(wrapped, trainer, args, kwargs):
        batch = batch_arg(args, kwargs)
        if lanes.passing_through(PREP_LANE) or not getattr(trainer, "use_critic", False):
            return wrapped(*args, **kwargs)
        if not adapter.is_step_reward(batch):
            return wrapped(*args, **kwargs)
        step = _new_step(trainer, adapter, batch)
        if adapter.reward_pool(trainer) == step.critic_pool:
            deferral.join("the reward model on the critic's pool")
        if step.may_overlap:
            reason = adapter.why_not_during_reward(trainer, step.actor_pool)
            if reason:
                _log_once(reason, "The reward model runs before old_log_prob and ref")
            else:
                step.launch_actor_lane(adapter.actor_methods(trainer))
        setattr(trainer, STEP_ATTR, step)
        started = step.critic_started()
        try:
            result = wrapped(*args, **kwargs)
        except Exception as exc:
            step.aborted = True  # the actor's lane calls no more workers
            vars(trainer).pop(STEP_ATTR, None)
            if step.early:
                raise step.failure("critic", "reward model", exc) from exc
            raise
        step.critic_ended(started)
        return result

    return _wrap_compute_reward_colocate


def make_actor_compute_wrapper(adapter: Any) -> Callable[..., Any]:
    """For ``_compute_old_log_prob`` and ``_compute_ref_log_prob``: launch values at the first, time both."""

    def _wrap_actor_compute(wrapped, trainer, args, kwargs):
        if lanes.passing_through(PREP_LANE):
            return wrapped(*args, **kwargs)  # the actor's lane beside the reward model
        if not getattr(trainer, "use_critic", False):
            _log_once("this run has no critic (e.g. GRPO)")
            return wrapped(*args, **kwargs)
        deferral.raise_if_failed()  # a deferred critic update that failed during generation
        if wrapped.__name__ == "_compute_ref_log_prob" and adapter.ref_pool(trainer) not in (
            None,
            adapter.pools(trainer)[0],
        ):
            deferral.join("the reference on the critic's pool")  # its workers are the deferred update's
        batch = batch_arg(args, kwargs)
        step: PrepStep | None = vars(trainer).get(STEP_ATTR)
        if step is None or not adapter.same_batch(step.batch, batch):
            if step is not None:
                step.aborted = True  # a step that never reached values: never joined
            step = _new_step(trainer, adapter, batch)
            setattr(trainer, STEP_ATTR, step)
        if step.may_overlap and step.values_future is None:
            step.launch_values(args, kwargs)  # the critic's pool is free: no reward model, or it is done
        if wrapped.__name__ in step.early:
            try:
                step.raise_if_values_failed()
                return step.take_early(wrapped.__name__)
            except PrepFailedError:
                vars(trainer).pop(STEP_ATTR, None)
                raise
        started = time.monotonic()
        step.actor.start = step.actor.start or started
        try:
            step.raise_if_values_failed()  # fail fast, before more work on the actor's pool
            result = wrapped(*args, **kwargs)
        except PrepFailedError:
            vars(trainer).pop(STEP_ATTR, None)
            raise
        except Exception as exc:
            step.aborted = True
            vars(trainer).pop(STEP_ATTR, None)
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
        if lanes.passing_through(PREP_LANE):
            return wrapped(*args, **kwargs)  # the launched call itself
        step: PrepStep | None = vars(trainer).pop(STEP_ATTR, None)
        batch = batch_arg(args, kwargs)
        if step is not None and step.values_future is not None:
            if not adapter.same_batch(step.batch, batch):
                step.aborted = True
                raise RuntimeError(
                    "verl-split: _compute_values was called with another batch than the values it started; "
                    "please report this with your verl version and trainer."
                )
            result = adapter.values_result(step, step.join_values(), args, kwargs)
            deferral.raise_if_failed()  # the values lane joined step k's critic: its record, on this thread
        else:
            if step is None:  # no actor-side call this step (bypass mode without ref)
                _log_once(
                    "no old_log_prob or ref call came before values in this step (verl's bypass mode without a "
                    "reference policy), so values has nothing to run beside"
                )
                actor_pool, critic_pool = adapter.pools(trainer)
                step = PrepStep(trainer, adapter, actor_pool, critic_pool, batch)
            deferral.join("values")  # the previous step's critic update, if it runs on
            started = step.critic_started()
            result = wrapped(*args, **kwargs)
            step.critic_ended(started)
        step.finish()
        return result

    return _wrap_compute_values
