"""The update overlap's wrappers of verl's ``_update_critic`` and ``_update_actor`` (``seams.py`` names them).

How the two cooperate, and the step they coordinate: ``updates.py``. Here: per step, whether the updates
may overlap (and whether the critic's may run on into the next step, ``deferral.py``), and the calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from verl_split.core import log, settings
from verl_split.core import metric_names as names
from verl_split.core.errors import UpdateFailedError
from verl_split.runtime.overlap import deferral, lanes
from verl_split.runtime.overlap.trainers import TrainerAdapter, batch_arg
from verl_split.runtime.overlap.updates import ACTOR_LANE, STEP_ATTR, CriticGroupDuringStep, UpdateStep

logger = logging.getLogger("verl_split.overlap")


#: Why a step that overlaps nothing in its updates has nothing to overlap (said once, as every reason here).
WARMUP = "critic warm-up (trainer.critic_warmup): the actor does not update in this step"
NO_CRITIC = "this run has no critic (e.g. GRPO): the actor's update has nothing to run beside"
BLOCKING = (
    "{trainer}._update_critic dispatched the critic's update with a blocking call, so it was over before "
    "anything could run beside it (split/overlapped 0{deferred}); please report this with your verl version"
)


def _why_sequential_defer(reason: str, trainer: Any) -> str:
    """Why a step that does not overlap its updates does not defer the critic's either."""
    return reason or WARMUP


def _why_sequential(trainer: Any, adapter: TrainerAdapter, actor_pool: str | None, critic_pool: str | None) -> str:
    """Empty when this step's updates may overlap, else the reason they run one after the other."""
    if not settings.current().overlap:
        return "VERL_SPLIT_OVERLAP is off"
    if not adapter.runs_stock_step(trainer):
        return f"{type(trainer).__name__} overrides {adapter.step_method}(), so the order of its updates is unknown"
    if actor_pool is None or actor_pool == critic_pool:
        return f"actor and critic share resource pool {critic_pool!r}"
    return ""


def make_update_critic_wrapper(adapter: TrainerAdapter) -> Callable[..., Any]:
    def _wrap_update_critic(wrapped, trainer, args, kwargs):
        deferral.join("the next critic update")  # normally joined at values already
        actor_pool, critic_pool = adapter.pools(trainer)
        reason = _why_sequential(trainer, adapter, actor_pool, critic_pool)
        if reason:
            log.once(logger, f"Actor and critic updates run one after the other: {reason}.")
        elif not adapter.actor_updates_this_step(trainer):
            log.once(logger, f"The critic's update runs alone: {WARMUP}.")
        overlap = not reason and adapter.actor_updates_this_step(trainer)
        step = UpdateStep(trainer, adapter, actor_pool, critic_pool, args, kwargs, overlapped=overlap)
        step.global_step = trainer.global_steps
        vars(trainer).pop(STEP_ATTR, None)
        defer = False
        step.defer_asked = settings.current().defer_critic
        if step.defer_asked:
            why_not = adapter.why_not_defer(trainer) if overlap else _why_sequential_defer(reason, trainer)
            if why_not:
                log.once(logger, f"The critic's update is joined in its own step: {why_not}.")
            defer = overlap and not why_not
        step.critic.start = time.monotonic()
        if defer:
            step.deferred = True
            worker_group = trainer.critic_wg
            trainer.critic_wg = CriticGroupDuringStep(worker_group, step)
            try:
                # Returns once the critic's request is out; the stock call goes on on its own thread.
                result = deferral.launch(step, wrapped, args, kwargs)
            finally:
                trainer.critic_wg = worker_group
            if step.deferred:
                logger.info(
                    "Starting the actor update beside the critic's (step %s); the critic's update runs on into "
                    "the next step",
                    step.global_step,
                )
            else:  # deferral.launch found the critic's update over when its call returned
                blocking = BLOCKING.format(trainer=type(trainer).__name__, deferred=", split/critic_update_deferred 0")
                log.once(logger, f"The critic's update is joined in its own step: {blocking}.", logging.WARNING)
            setattr(trainer, STEP_ATTR, step)  # _update_actor runs here and reports its side
            return result
        if not overlap:
            result = wrapped(*args, **kwargs)
            step.critic.end = time.monotonic()
            if adapter.actor_updates_this_step(trainer):
                setattr(trainer, STEP_ATTR, step)  # _update_actor reports both
            else:
                step.finish(result, args, kwargs)  # critic warm-up: no actor update follows
            return result
        worker_group = trainer.critic_wg
        trainer.critic_wg = CriticGroupDuringStep(worker_group, step)
        try:
            result = wrapped(*args, **kwargs)
        except UpdateFailedError:
            raise
        except Exception as exc:
            raise step.failure("critic", critic_pool, exc) from exc
        finally:
            trainer.critic_wg = worker_group
        if not step.critic.end:
            step.critic.end = time.monotonic()
        if step.actor_future is None:
            blocking = BLOCKING.format(trainer=type(trainer).__name__, deferred="")
            log.once(logger, f"Actor and critic updates run one after the other: {blocking}.", logging.WARNING)
        setattr(trainer, STEP_ATTR, step)
        return result

    return _wrap_update_critic


def make_update_actor_wrapper(adapter: TrainerAdapter) -> Callable[..., Any]:
    def _wrap_update_actor(wrapped, trainer, args, kwargs):
        if lanes.passing_through(ACTOR_LANE):
            return wrapped(*args, **kwargs)  # the launched update itself
        step: UpdateStep | None = vars(trainer).pop(STEP_ATTR, None)
        if step is None:  # no critic this step (GRPO): stock, and said
            log.once(logger, f"The actor's update runs alone: {NO_CRITIC}.")
            result = wrapped(*args, **kwargs)
            adapter.report(result, args, kwargs, {names.OVERLAPPED: 0.0})
            return result
        if step.actor_future is None:  # sequential, or beside a deferred critic update: run it here, timed
            step.actor.start = time.monotonic()
            try:
                result = wrapped(*args, **kwargs)
            except Exception as exc:
                if step.deferred:  # the critic's update runs meanwhile: name the lane that failed
                    raise step.failure("actor", step.actor_pool, exc) from exc
                raise
            step.actor.end = time.monotonic()
        else:
            if batch_arg(args, kwargs) is not batch_arg(step.critic_args, step.critic_kwargs):
                raise RuntimeError(
                    "verl-split: _update_actor was called with another batch than the actor update it started; "
                    "please report this with your verl version and trainer."
                )
            result = step.join_actor()
            adapter.merge_metrics(args, kwargs, step.actor_metrics)
        step.finish(result, args, kwargs)
        return result

    return _wrap_update_actor
