"""Let the critic's update of step k run on while the actor pool starts step k+1.

Nothing in step k+1 needs the critic before its ``values``: generation needs only the actor and
its weight sync (ReaLHF's rule: a model's first call of a step waits only for that model's last
call of the step before; ``shared/research/pipelining.md`` §2). Under split placement the
critic's update therefore need not sit on the step's path. With ``defer_critic`` in
``VERL_SPLIT_OVERLAP``:

1. ``launch`` (from overlap.py's ``_update_critic`` wrapper) runs the stock ``_update_critic`` on
   a controller thread, its worker group seen through overlap.py's dispatch proxy. The trainer's
   thread waits only for the critic's dispatch -- its request is then serialised, so every side
   effect on the batch keeps its stock order -- and returns what the trainer expects from
   ``_update_critic`` without the critic's metrics (``TrainerAdapter.placeholder``). The actor's
   update, the checkpoint, the weight sync, validation and the next step's generation follow.
2. ``join`` waits for the update where something needs it: the next step's first call on the
   critic's pool (values; a reward model colocated there; a shared-rollout weight push), a
   checkpoint save (so it holds the updated critic and a resume stays exact), the end of ``fit``.
   values(k+1) is dispatched only after update(k) returned on every critic worker, whatever the
   worker's own call order.
3. Step k's record for verl's tracker is held by the ``Tracking.log`` seam until the join adds the
   critic's metrics (reduced as stock ``fit`` reduces them) and ``split/critic_update_hidden_s``,
   ``split/critic_join_wait_s`` and ``split/log_delay_s`` (how long the record waited).
4. What the update reads stays alive: v1 clears the step's TransferQueue keys at its end; that
   clear is postponed until the join (the ``transfer_queue.kv_clear`` seam).
5. A failure of the update is raised on the trainer's thread at the next point it passes (every
   seam here and in the overlaps), naming the role, the pool and the step. Should the trainer sit
   in one long call instead (a GPU generation), the process is ended ``ABORT_AFTER_S`` after the
   failure, with the same message in its log, so a run never burns its GPUs on a dead critic.

Exactness: the critic's update reads only step k's batch, already sent; values(k+1) runs after it;
the checkpoint after it. So the numbers are those of the same run without the deferral.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl_split.errors import UpdateFailedError

logger = logging.getLogger("verl_split.deferred_critic")

#: Seconds after a failed deferred update before the process is ended, if the trainer has not
#: reached a point where it raises the failure itself (well inside the 30 s a run has to stop).
ABORT_AFTER_S = 20.0


@dataclass
class _Deferred:
    """One critic update running on past its step."""

    step: Any  # overlap._Step of step k: trainer, adapter, pools, the critic's and actor's intervals
    args: tuple  # the stock _update_critic call's arguments (the batch)
    kwargs: dict
    private: dict | None  # v1: the metrics dict the critic's call writes to
    result: concurrent.futures.Future  # what the stock _update_critic returned, on its thread
    trainer_thread: threading.Thread
    kept: tuple[frozenset, str] | None = None  # TransferQueue (keys, partition) the update reads
    postponed: list[Callable[[], Any]] = field(default_factory=list)  # kv_clear calls for those keys
    actor_done_at: float = 0.0  # when the step's actor update returned to the trainer
    join_started: float = 0.0
    join_ended: float = 0.0
    failure: UpdateFailedError | None = None
    raised: bool = False  # the failure reached the trainer's thread
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def global_step(self) -> int:
        return self.step.global_step

    @property
    def trainer(self) -> Any:
        return self.step.trainer


@dataclass
class _Held:
    """A step's record for verl's tracker, waiting for its critic's metrics."""

    data: dict
    emit: Callable[[dict], Any]
    held_at: float


_lock = threading.Lock()
_current: _Deferred | None = None
_held: dict[int, _Held] = {}  # step -> its record, held until the join
_ready: dict[int, dict] = {}  # step -> metrics of a joined update whose record is not logged yet


# -- step k: dispatch, and go on ------------------------------------------------------------
def launch(step: Any, stock_update_critic: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run the stock ``_update_critic`` on a controller thread; return once its request is out."""
    global _current
    adapter = step.adapter
    call_args, call_kwargs, private = adapter.private_metrics_call(args, kwargs)
    result: concurrent.futures.Future = concurrent.futures.Future()
    step.dispatched = concurrent.futures.Future()

    def run() -> None:
        try:
            value = stock_update_critic(*call_args, **call_kwargs)
        except BaseException as exc:  # handed to whoever joins
            step.critic.end = time.monotonic()
            result.set_exception(exc)
        else:
            step.critic.end = time.monotonic()
            result.set_result(value)
        if not step.dispatched.done():  # returned without a non-blocking dispatch: nothing runs on
            step.dispatched.set_result(False)

    # A daemon thread, not an executor: a failed step must not keep the process from exiting.
    thread = threading.Thread(target=run, name="verl-split-critic-update", daemon=True)
    thread.start()
    overlapped = step.dispatched.result()  # the critic's request is out (or its call is over)
    if not overlapped or result.done():
        # Nothing to defer (a blocking dispatch, or a failure before it): finish here, as stock would.
        step.deferred = False
        try:
            value = result.result()
        except Exception as exc:
            raise step.failure("critic", step.critic_pool, exc) from exc
        adapter.merge_metrics(args, kwargs, private)
        return value
    deferred = _Deferred(step, args, kwargs, private, result, threading.current_thread())
    deferred.kept = adapter.kept_batch(args, kwargs)
    result.add_done_callback(lambda _: _watch_failure(deferred))
    with _lock:
        _current = deferred
    return adapter.placeholder(args, kwargs)


def actor_done(step: Any) -> None:
    """The step's actor update returned: what the critic runs from now on is hidden behind other work."""
    deferred = _current
    if deferred is not None and deferred.step is step:
        deferred.actor_done_at = time.monotonic()
    raise_if_failed()


# -- joins ---------------------------------------------------------------------------------
def join(where: str) -> None:
    """Wait for the deferred update, if one runs; ``where`` names what needs it (for the log)."""
    deferred = _current
    if deferred is None:
        return
    with deferred.lock:  # one thread finishes it; another joining meanwhile waits for that
        if not deferred.done:
            deferred.join_started = time.monotonic()
            try:
                value = deferred.result.result()
            except BaseException as exc:
                deferred.failure = deferred.failure or _failure(deferred, exc)
                value = None
            deferred.join_ended = time.monotonic()
            _finish(deferred, value, where)
            deferred.done = True
    if deferred.failure is not None:
        _raise(deferred)


def raise_if_failed() -> None:
    """Raise the deferred update's failure now, if it has failed (called at every seam)."""
    deferred = _current
    if deferred is not None and deferred.result.done() and deferred.result.exception() is not None:
        join("the failure of the deferred critic update")


def _raise(deferred: _Deferred) -> None:
    if threading.current_thread() is deferred.trainer_thread:
        deferred.raised = True
    raise deferred.failure


def _failure(deferred: _Deferred, exc: BaseException) -> UpdateFailedError:
    step = deferred.step
    return UpdateFailedError(
        f"the critic update of step {deferred.global_step} failed on resource pool {step.critic_pool!r} while the "
        f"actor pool {step.actor_pool!r} went on with the next step (VERL_SPLIT_OVERLAP defer_critic): "
        f"{type(exc).__name__}: {exc}. The run stops here. To see it fail in its own step, rerun with "
        "VERL_SPLIT_OVERLAP=updates,prep."
    )


def _finish(deferred: _Deferred, value: Any, where: str) -> None:
    """Collect the critic's metrics, release what waited for the update, and log the held record."""
    global _current
    step = deferred.step
    metrics: dict[str, Any] = {}
    if deferred.failure is None:
        metrics.update(step.adapter.critic_metrics(value, deferred.private, deferred.args, deferred.kwargs))
    else:
        metrics["split/critic_metrics_missing"] = 1.0
    metrics.update(step.metrics(final=True))
    actor_done = deferred.actor_done_at or deferred.join_started
    critic_end = step.critic.end or deferred.join_ended
    # The critic's interval in three parts: beside the actor's update, hidden behind the actor pool's
    # next work (sync, checkpoint, generation, ...), and waited for at the join.
    hidden = max(0.0, min(critic_end, deferred.join_started) - max(step.critic.start, actor_done))
    waited = max(0.0, critic_end - deferred.join_started)
    metrics["split/critic_update_hidden_s"] = hidden
    metrics["split/critic_join_wait_s"] = waited
    if deferred.failure is None:
        logger.info(
            "Critic update of step %s completed in %.1fs, %.1fs of it hidden behind the next step; joined at %s "
            "after waiting %.1fs",
            deferred.global_step,
            step.critic.seconds,
            hidden,
            where,
            waited,
        )
    step.record_timeline()
    with _lock:  # the record is either held already, or finds these metrics ready when it is logged
        held = _held.pop(deferred.global_step, None)
        if held is None:
            _ready[deferred.global_step] = metrics
        if _current is deferred:
            _current = None
    for clear in deferred.postponed:
        clear()
    deferred.postponed.clear()
    if held is not None:
        _emit(held, metrics)


# -- the step's record for verl's tracker ------------------------------------------------------
def log_or_hold(step: int | None, data: dict, emit: Callable[[dict], Any]) -> bool:
    """Called by the ``Tracking.log`` seam: True when it emitted or held the record itself."""
    with _lock:
        ready = _ready.pop(step, None)
        deferred = _current
        hold = ready is None and deferred is not None and deferred.global_step == step
        hold = hold and "split/critic_update_deferred" in data
        if hold:
            _held[step] = _Held(dict(data), emit, time.monotonic())
    if ready is not None:
        emit({**data, **ready})
        return True
    raise_if_failed()
    return hold


def _emit(held: _Held, metrics: dict) -> None:
    held.emit({**held.data, **metrics, "split/log_delay_s": time.monotonic() - held.held_at})


def flush_without_critic() -> None:
    """Log held records as they are (the run is ending on an error): the step's other metrics are not lost."""
    with _lock:
        records = sorted(_held.items())
        _held.clear()
    for step, held in records:
        try:
            _emit(held, {"split/critic_metrics_missing": 1.0})
        except Exception:  # the run is failing already; say so and keep the first error
            logger.exception("could not log the held metrics of step %s", step)


# -- what the update reads stays alive -------------------------------------------------------
def postpone_clear(keys: Any, partition_id: str, clear: Callable[[], Any]) -> bool:
    """True when ``clear`` (a TransferQueue ``kv_clear``) touches data the deferred update reads: it then
    runs at the join instead of now."""
    deferred = _current
    if deferred is None or deferred.kept is None or deferred.done:
        return False
    kept_keys, kept_partition = deferred.kept
    asked = {keys} if isinstance(keys, str) else set(keys)
    if partition_id != kept_partition or not asked & kept_keys:
        return False
    deferred.postponed.append(clear)
    return True


# -- the end of fit ------------------------------------------------------------------------
def end_of_fit(error: BaseException | None) -> UpdateFailedError | None:
    """At ``fit``'s exit: join (or, on an error, not wait) and log what is held; return a deferred
    failure that explains ``error``, if there is one."""
    deferred = _current
    if error is None:
        join("the end of training")
        return None
    if deferred is not None and deferred.result.done():
        try:
            join("the end of a failed run")
        except UpdateFailedError as failure:
            return failure
    flush_without_critic()
    if deferred is not None and deferred.failure is not None:
        return deferred.failure
    return None


def _watch_failure(deferred: _Deferred) -> None:
    """On the critic's thread, when its update ends: if it failed, make sure the run ends."""
    exc = deferred.result.exception()
    if exc is None:
        return
    deferred.failure = deferred.failure or _failure(deferred, exc)
    logger.error("verl-split: %s", deferred.failure)
    timer = threading.Timer(ABORT_AFTER_S, _abort_if_unraised, args=(deferred,))
    timer.daemon = True
    timer.start()


def _abort_if_unraised(deferred: _Deferred) -> None:
    if deferred.raised:
        return
    logger.error(
        "verl-split: %s The trainer has been in one call for %.0fs since; ending this process so that the run "
        "stops (its last checkpoint is intact).",
        deferred.failure,
        ABORT_AFTER_S,
    )
    flush_without_critic()
    logging.shutdown()
    os._exit(1)


def reset() -> None:
    """Forget every deferred update and held record (tests)."""
    global _current
    with _lock:
        _current = None
        _held.clear()
        _ready.clear()


# -- wrappers for the seams (seams/deferred_critic_*.py) ----------------------------------------
def wrap_fit(wrapped, trainer, args, kwargs):
    """``fit``: join at the end of training; on an error, log what is held and name a deferred failure."""
    try:
        result = wrapped(*args, **kwargs)
    except Exception as exc:
        failure = end_of_fit(exc)
        if failure is not None and failure is not exc:
            raise failure from exc
        raise
    except BaseException:  # Ctrl-C, SystemExit: do not wait for the critic, keep the step's metrics
        flush_without_critic()
        raise
    end_of_fit(None)
    return result


def wrap_save_checkpoint(wrapped, trainer, args, kwargs):
    """``_save_checkpoint``: the checkpoint holds the updated critic, so a resume continues exactly."""
    join("the checkpoint save")
    return wrapped(*args, **kwargs)


def make_reward_join_wrapper(adapter: Any) -> Callable[..., Any]:
    """``_compute_reward_colocate`` (v1): a reward model on the critic's pool runs after the critic's update."""

    def _wrap_compute_reward_colocate(wrapped, trainer, args, kwargs):
        if adapter.reward_pool(trainer) == adapter.pools(trainer)[1]:
            join("the reward model on the critic's pool")
        else:
            raise_if_failed()
        return wrapped(*args, **kwargs)

    return _wrap_compute_reward_colocate
