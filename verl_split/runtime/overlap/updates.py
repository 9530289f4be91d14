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
import time
from dataclasses import dataclass, field
from typing import Any

import wrapt

from verl_split.core import metric_names as names
from verl_split.core.errors import UpdateFailedError
from verl_split.runtime.overlap import deferral, lanes
from verl_split.runtime.overlap.lanes import Interval
from verl_split.runtime.overlap.trainers import TrainerAdapter

logger = logging.getLogger("verl_split.overlap")

# The attribute a trainer carries between its _update_critic and _update_actor calls.
STEP_ATTR = "_verl_split_step"
# The controller thread's own call to _update_actor passes straight through (lanes.passthrough).
ACTOR_LANE = "update_actor_lane"


@dataclass
class UpdateStep:
    """One step's pair of updates."""

    trainer: Any
    adapter: TrainerAdapter
    actor_pool: str | None
    critic_pool: str | None
    critic_args: tuple
    critic_kwargs: dict
    overlapped: bool
    global_step: int = 0  # the trainer's global_steps when the step's critic update started
    #: the critic's update runs on into the next step (deferral.py); set when it was launched so
    deferred: bool = False
    #: VERL_SPLIT_OVERLAP asked for the deferral: a step that does not defer reports 0, never nothing
    defer_asked: bool = False
    dispatched: concurrent.futures.Future | None = None  # deferred: the critic's request is out
    critic: Interval = field(default_factory=Interval)
    actor: Interval = field(default_factory=Interval)
    actor_future: concurrent.futures.Future | None = None
    actor_metrics: dict | None = None
    both_in_flight_at: float = 0.0  # when the actor's thread was started after the critic's dispatch

    # -- the actor side, on a controller thread -------------------------------------------
    def launch_actor(self) -> None:
        args, kwargs, self.actor_metrics = self.adapter.private_metrics_call(self.critic_args, self.critic_kwargs)
        self.actor_future = concurrent.futures.Future()
        self.both_in_flight_at = time.monotonic()
        logger.info("Starting parallel actor and critic updates (step %s)", self.trainer.global_steps)
        lanes.start_lane("verl-split-actor-update", lambda: self._run_actor(args, kwargs))

    def _run_actor(self, args: tuple, kwargs: dict) -> None:
        self.actor.start = time.monotonic()
        try:
            with lanes.passthrough(ACTOR_LANE):
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
        return CriticResult(future, self)

    def wait_for_critic(self, future: Any) -> Any:
        """``future.get()``, but raise at once if the actor update fails meanwhile."""
        critic_done: concurrent.futures.Future = concurrent.futures.Future()

        def get() -> None:
            try:
                critic_done.set_result(future.get())
            except BaseException as exc:
                critic_done.set_exception(exc)

        lanes.start_lane("verl-split-critic-wait", get)
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
            return {names.OVERLAPPED: 1.0, names.CRITIC_UPDATE_DEFERRED: 1.0, names.ACTOR_UPDATE_S: t_actor}
        metrics = {names.CRITIC_UPDATE_S: t_critic, names.OVERLAPPED: float(self.really_overlapped)}
        if self.deferred:
            metrics[names.OVERLAPPED] = 1.0
            metrics[names.CRITIC_UPDATE_DEFERRED] = 1.0
        elif self.defer_asked:
            metrics[names.CRITIC_UPDATE_DEFERRED] = 0.0
        if self.actor.end:
            start, end = min(self.critic.start, self.actor.start), max(self.critic.end, self.actor.end)
            wall = max(end - start, 1e-9)
            overlap = max(0.0, min(self.critic.end, self.actor.end) - max(self.critic.start, self.actor.start))
            metrics.update(
                {
                    names.ACTOR_UPDATE_S: t_actor,
                    names.UPDATE_WALL_S: wall,
                    names.OVERLAP_S: overlap,
                    names.SPEEDUP: (t_actor + t_critic) / wall,
                    names.IDEAL_SPEEDUP: (t_actor + t_critic) / max(t_actor, t_critic, 1e-9),
                    names.ACTOR_POOL_IDLE_SHARE: max(wall - t_actor, 0.0) / wall,
                    names.CRITIC_POOL_IDLE_SHARE: max(wall - t_critic, 0.0) / wall,
                }
            )
        if self.both_in_flight_at:
            # What coordinating costs: from entering the critic's update to both updates in flight.
            metrics[names.DISPATCH_S] = self.both_in_flight_at - self.critic.start
        return metrics

    def finish(self, result: Any, args: tuple, kwargs: dict) -> None:
        metrics = {
            **lanes.take_metrics(self.trainer),
            **self.metrics(final=False),
            **self.adapter.pool_sizes(self.trainer),
        }
        if self.actor.end:
            logger.info("Actor update completed in %.1fs", self.actor.seconds)
        if self.deferred:  # the critic's side is logged and reported when deferred_critic joins it
            self.adapter.report(result, args, kwargs, metrics)
            self.record_timeline(critic=False)
            deferral.actor_done(self)
            return
        logger.info("Critic update completed in %.1fs", self.critic.seconds)
        if self.actor.end:
            logger.info(
                "Update phase: %.1fs wall, overlap %.1fs, speed-up %.2fx (ideal %.2fx)",
                metrics[names.UPDATE_WALL_S],
                metrics[names.OVERLAP_S],
                metrics[names.SPEEDUP],
                metrics[names.IDEAL_SPEEDUP],
            )
        self.adapter.report(result, args, kwargs, metrics)
        self.record_timeline()

    def record_timeline(self, critic: bool = True) -> None:
        n = self.global_step
        if critic:
            lanes.record_interval(f"critic update (step {n})", f"critic pool: {self.critic_pool}", self.critic)
        if self.actor.end and not (critic and self.deferred):  # a deferred step's actor was recorded at its end
            lanes.record_interval(f"actor update (step {n})", f"actor pool: {self.actor_pool}", self.actor)


class CriticGroupDuringStep(wrapt.ObjectProxy):
    """The critic's worker group as one stock ``_update_critic`` call sees it: dispatching
    the critic's update also starts the actor's.

    Found while testing 0.8: verl asks a worker group for its collect ranks on the first
    call that collects from it, a remote call that queues behind an update already
    running there. In ``fit`` the critic's ``compute_values`` has cached them before the
    update, so the overlap holds; a trainer whose *first* critic call is the update
    would wait for the critic there and overlap nothing on that step.
    """

    def __init__(self, worker_group: Any, step: UpdateStep) -> None:
        super().__init__(worker_group)
        self._self_step = step

    # 0.8/0.9 engine workers: TrainingWorker.train_mini_batch (already blocking=False).
    def train_mini_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_step.on_critic_dispatched(self.__wrapped__.train_mini_batch(*args, **kwargs))

    # legacy fsdp_workers: CriticWorker.update_critic.
    def update_critic(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_step.on_critic_dispatched(self.__wrapped__.update_critic(*args, **kwargs))


class CriticResult(wrapt.ObjectProxy):
    """The critic's future, whose ``get()`` also watches the actor update."""

    def __init__(self, future: Any, step: UpdateStep) -> None:
        super().__init__(future)
        self._self_step = step

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_step.wait_for_critic(self.__wrapped__)
