"""Run the critic update and the actor update of one PPO step at the same time.

Stock verl runs, in each step, ``_update_critic(batch, ...)`` -- dispatch the critic's
update to its workers, then ``.get()`` the result -- and afterwards
``_update_actor(batch, ...)``. Both methods consume their results at once (v1 indexes
``update_actor(...)["metrics"]``), so deferring a ``.get()`` inside them would mean
copying them. verl-split keeps both methods as they are and changes only *when* the
actor's runs:

1. While the stock ``_update_critic`` runs, its worker group is seen through a proxy.
   The moment the critic's (non-blocking) dispatch returns -- the critic's workers are
   busy and their batch is already serialised -- the stock ``_update_actor`` of the same
   step is started on a controller thread. Both updates are now in flight.
2. The stock ``_update_critic`` goes on to wait for the critic. That wait fails fast:
   if the actor update fails first, the error surfaces at once, naming the actor.
3. The stock call to ``_update_actor`` that follows joins the thread and returns the
   very result the actor update produced. Checkpointing and weight sync, which verl runs
   after ``_update_actor`` returns, keep their place.

Every side effect on the batch happens in stock order (critic's request first, then the
actor's), so the numerics are those of the same run without overlap. Overlap is used
only when the trainer runs verl's own step (a recipe that overrides it runs stock), the
actor and critic are on different pools, and the actor updates in this step (not during
critic warm-up). Otherwise the updates run one after the other, still timed.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import wrapt

from verl_split import deferred_critic, settings
from verl_split.errors import UpdateFailedError
from verl_split.timeline import Timeline
from verl_split.trainers import TrainerAdapter, batch_arg

logger = logging.getLogger("verl_split.overlap")

# The attribute a trainer carries between its _update_critic and _update_actor calls.
_STEP_ATTR = "_verl_split_step"
# Set on the controller thread, so its own call to _update_actor passes straight through.
_controller = threading.local()


@dataclass
class _Interval:
    start: float = 0.0
    end: float = 0.0

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


@dataclass
class _Step:
    """One step's pair of updates."""

    trainer: Any
    adapter: TrainerAdapter
    actor_pool: str | None
    critic_pool: str | None
    critic_args: tuple
    critic_kwargs: dict
    overlapped: bool
    global_step: int = 0  # the trainer's global_steps when the step's critic update started
    #: the critic's update runs on into the next step (deferred_critic.py); set when it was launched so
    deferred: bool = False
    dispatched: concurrent.futures.Future | None = None  # deferred: the critic's request is out
    critic: _Interval = field(default_factory=_Interval)
    actor: _Interval = field(default_factory=_Interval)
    actor_future: concurrent.futures.Future | None = None
    actor_metrics: dict | None = None
    both_in_flight_at: float = 0.0  # when the actor's thread was started after the critic's dispatch

    # -- the actor side, on a controller thread -------------------------------------------
    def launch_actor(self) -> None:
        args, kwargs, self.actor_metrics = self.adapter.private_metrics_call(self.critic_args, self.critic_kwargs)
        self.actor_future = concurrent.futures.Future()
        self.both_in_flight_at = time.monotonic()
        logger.info("Starting parallel actor and critic updates (step %s)", self.trainer.global_steps)
        # A daemon thread, not an executor: a failed step must not keep the process from exiting.
        thread = threading.Thread(
            target=self._run_actor, args=(args, kwargs), name="verl-split-actor-update", daemon=True
        )
        thread.start()

    def _run_actor(self, args: tuple, kwargs: dict) -> None:
        _controller.active = True
        self.actor.start = time.monotonic()
        try:
            result = self.trainer._update_actor(*args, **kwargs)
        except BaseException as exc:  # handed to the main thread, which raises it
            self.actor.end = time.monotonic()
            self.actor_future.set_exception(exc)
        else:
            self.actor.end = time.monotonic()
            self.actor_future.set_result(result)

    def join_actor(self) -> Any:
        try:
            return self.actor_future.result()
        except Exception as exc:
            raise self.failure("actor", self.actor_pool, exc) from exc

    # -- the critic side, on the trainer's thread ------------------------------------------
    def on_critic_dispatched(self, future: Any) -> Any:
        if self.deferred:
            # The critic's stock _update_critic runs on its own thread and waits for its result there;
            # the trainer's thread, waiting for this, goes on to the actor's update.
            if callable(getattr(future, "get", None)) and not self.dispatched.done():
                self.dispatched.set_result(True)
            return future
        if not callable(getattr(future, "get", None)):
            # A blocking dispatch already holds the result: the critic is done, nothing to overlap
            # with. The actor's update then runs where stock runs it, and the step says so.
            self.critic.end = time.monotonic()
            return future
        if self.actor_future is None:
            self.launch_actor()
        return _CriticResult(future, self)

    def wait_for_critic(self, future: Any) -> Any:
        """``future.get()``, but raise at once if the actor update fails meanwhile."""
        critic_done: concurrent.futures.Future = concurrent.futures.Future()

        def get() -> None:
            try:
                critic_done.set_result(future.get())
            except BaseException as exc:
                critic_done.set_exception(exc)

        threading.Thread(target=get, name="verl-split-critic-wait", daemon=True).start()
        pending = {critic_done, self.actor_future}
        while True:
            done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            if critic_done in done:
                self.critic.end = time.monotonic()
                try:
                    return critic_done.result()
                except Exception as exc:
                    raise self.failure("critic", self.critic_pool, exc) from exc
            if self.actor_future.exception() is not None:
                self.join_actor()  # raises, naming the actor

    def failure(self, role: str, pool: str | None, exc: BaseException) -> UpdateFailedError:
        other = "actor" if role == "critic" else "critic"
        return UpdateFailedError(
            f"the {role} update failed on resource pool {pool!r} (step {self.global_step}) while the "
            f"{other} update was running: {type(exc).__name__}: {exc}. The run stops here; the {other}'s workers are "
            f"released when the trainer exits. To tell the two apart, rerun with VERL_SPLIT_OVERLAP=0."
        )

    # -- after both ----------------------------------------------------------------------
    @property
    def really_overlapped(self) -> bool:
        """Both updates were in flight at once: the critic's dispatch reached the proxy and
        started the actor's (a step planned to overlap whose critic call bypassed the proxy
        ran one after the other)."""
        return self.overlapped and self.actor_future is not None

    def metrics(self, final: bool = True) -> dict[str, float]:
        """The step's ``split/*`` update metrics; a deferred step's critic side only once ``final``."""
        t_critic, t_actor = self.critic.seconds, self.actor.seconds
        if self.deferred and not final:  # the critic's update still runs: deferred_critic adds the rest
            return {"split/overlapped": 1.0, "split/critic_update_deferred": 1.0, "split/actor_update_s": t_actor}
        metrics = {"split/critic_update_s": t_critic, "split/overlapped": float(self.really_overlapped)}
        if self.deferred:
            metrics["split/overlapped"] = 1.0
            metrics["split/critic_update_deferred"] = 1.0
        if self.actor.end:
            start, end = min(self.critic.start, self.actor.start), max(self.critic.end, self.actor.end)
            wall = max(end - start, 1e-9)
            overlap = max(0.0, min(self.critic.end, self.actor.end) - max(self.critic.start, self.actor.start))
            metrics.update(
                {
                    "split/actor_update_s": t_actor,
                    "split/update_wall_s": wall,
                    "split/overlap_s": overlap,
                    "split/speedup": (t_actor + t_critic) / wall,
                    "split/ideal_speedup": (t_actor + t_critic) / max(t_actor, t_critic, 1e-9),
                    "split/actor_pool_idle_share": max(wall - t_actor, 0.0) / wall,
                    "split/critic_pool_idle_share": max(wall - t_critic, 0.0) / wall,
                }
            )
        if self.both_in_flight_at:
            # What coordinating costs: from entering the critic's update to both updates in flight.
            metrics["split/dispatch_s"] = self.both_in_flight_at - self.critic.start
        return metrics

    def finish(self, result: Any, args: tuple, kwargs: dict) -> None:
        from verl_split import prep_overlap  # it builds on this module

        metrics = {
            **prep_overlap.take_metrics(self.trainer),
            **self.metrics(final=False),
            **self.adapter.pool_sizes(self.trainer),
        }
        if self.actor.end:
            logger.info("Actor update completed in %.1fs", self.actor.seconds)
        if self.deferred:  # the critic's side is logged and reported when deferred_critic joins it
            self.adapter.report(result, args, kwargs, metrics)
            self.record_timeline(critic=False)
            deferred_critic.actor_done(self)
            return
        logger.info("Critic update completed in %.1fs", self.critic.seconds)
        if self.actor.end:
            logger.info(
                "Update phase: %.1fs wall, overlap %.1fs, speed-up %.2fx (ideal %.2fx)",
                metrics["split/update_wall_s"],
                metrics["split/overlap_s"],
                metrics["split/speedup"],
                metrics["split/ideal_speedup"],
            )
        self.adapter.report(result, args, kwargs, metrics)
        self.record_timeline()

    def record_timeline(self, critic: bool = True) -> None:
        n = self.global_step
        if critic:
            record_interval(f"critic update (step {n})", f"critic pool: {self.critic_pool}", self.critic)
        if self.actor.end and not (critic and self.deferred):  # a deferred step's actor was recorded at its end
            record_interval(f"actor update (step {n})", f"actor pool: {self.actor_pool}", self.actor)


class _CriticGroupDuringStep(wrapt.ObjectProxy):
    """The critic's worker group as one stock ``_update_critic`` call sees it: dispatching
    the critic's update also starts the actor's.

    Found while testing 0.8: verl asks a worker group for its collect ranks on the first
    call that collects from it, a remote call that queues behind an update already
    running there. In ``fit`` the critic's ``compute_values`` has cached them before the
    update, so the overlap holds; a trainer whose *first* critic call is the update
    would wait for the critic there and overlap nothing on that step.
    """

    def __init__(self, worker_group: Any, step: _Step) -> None:
        super().__init__(worker_group)
        self._self_step = step

    # 0.8/0.9 engine workers: TrainingWorker.train_mini_batch (already blocking=False).
    def train_mini_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_step.on_critic_dispatched(self.__wrapped__.train_mini_batch(*args, **kwargs))

    # legacy fsdp_workers: CriticWorker.update_critic.
    def update_critic(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_step.on_critic_dispatched(self.__wrapped__.update_critic(*args, **kwargs))


class _CriticResult(wrapt.ObjectProxy):
    """The critic's future, whose ``get()`` also watches the actor update."""

    def __init__(self, future: Any, step: _Step) -> None:
        super().__init__(future)
        self._self_step = step

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_step.wait_for_critic(self.__wrapped__)


_timelines: dict[str, Timeline] = {}
_warned: set[str] = set()


def record_interval(name: str, lane: str, interval: _Interval) -> None:
    """Add one interval to the ``VERL_SPLIT_TRACE`` timeline, if one is asked for."""
    path = settings.current().trace_path
    if not path:
        return
    timeline = _timelines.setdefault(path, Timeline(path))
    timeline.add(name, lane, interval.start, interval.end)
    timeline.flush()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def _log_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.info(message)


def _why_sequential_defer(reason: str, trainer: Any) -> str:
    """Why a step that does not overlap its updates does not defer the critic's either."""
    if reason:
        return reason
    return "critic warm-up (trainer.critic_warmup): the actor does not update in this step"


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
        deferred_critic.join("the next critic update")  # normally joined at values already
        actor_pool, critic_pool = adapter.pools(trainer)
        reason = _why_sequential(trainer, adapter, actor_pool, critic_pool)
        if reason and reason not in _warned:
            _warned.add(reason)
            logger.info("Actor and critic updates run one after the other: %s.", reason)
        overlap = not reason and adapter.actor_updates_this_step(trainer)
        step = _Step(trainer, adapter, actor_pool, critic_pool, args, kwargs, overlapped=overlap)
        step.global_step = trainer.global_steps
        vars(trainer).pop(_STEP_ATTR, None)
        defer = False
        if settings.current().defer_critic:
            why_not = adapter.why_not_defer(trainer) if overlap else _why_sequential_defer(reason, trainer)
            if why_not:
                _log_once(f"The critic's update is joined in its own step: {why_not}.")
            defer = overlap and not why_not
        step.critic.start = time.monotonic()
        if defer:
            step.deferred = True
            worker_group = trainer.critic_wg
            trainer.critic_wg = _CriticGroupDuringStep(worker_group, step)
            try:
                # Returns once the critic's request is out; the stock call goes on on its own thread.
                result = deferred_critic.launch(step, wrapped, args, kwargs)
            finally:
                trainer.critic_wg = worker_group
            if step.deferred:
                logger.info(
                    "Starting the actor update beside the critic's (step %s); the critic's update runs on into "
                    "the next step",
                    step.global_step,
                )
            setattr(trainer, _STEP_ATTR, step)  # _update_actor runs here and reports its side
            return result
        if not overlap:
            result = wrapped(*args, **kwargs)
            step.critic.end = time.monotonic()
            if adapter.actor_updates_this_step(trainer):
                setattr(trainer, _STEP_ATTR, step)  # _update_actor reports both
            else:
                step.finish(result, args, kwargs)  # critic warm-up: no actor update follows
            return result
        worker_group = trainer.critic_wg
        trainer.critic_wg = _CriticGroupDuringStep(worker_group, step)
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
            _warn_once(
                f"{type(trainer).__name__}._update_critic did not dispatch the critic's update through a "
                "non-blocking call verl-split watches (train_mini_batch, update_critic), so the updates ran one "
                "after the other (split/overlapped 0); please report this with your verl version"
            )
        setattr(trainer, _STEP_ATTR, step)
        return result

    return _wrap_update_critic


def make_update_actor_wrapper(adapter: TrainerAdapter) -> Callable[..., Any]:
    def _wrap_update_actor(wrapped, trainer, args, kwargs):
        if getattr(_controller, "active", False):
            return wrapped(*args, **kwargs)  # the launched update itself
        step: _Step | None = vars(trainer).pop(_STEP_ATTR, None)
        if step is None:  # no critic this step (GRPO): stock
            return wrapped(*args, **kwargs)
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
