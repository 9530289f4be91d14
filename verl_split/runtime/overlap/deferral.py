"""Let the critic's update of step k run on while the actor pool starts step k+1.

Nothing in step k+1 needs the critic before its ``values``: generation needs only the actor and
its weight sync (ReaLHF's rule: a model's first call of a step waits only for that model's last
call of the step before; arXiv 2406.14088, ``docs/impl.rst``). Under split placement the
critic's update therefore need not sit on the step's path. With ``defer_critic`` in
``VERL_SPLIT_OVERLAP``:

1. ``launch`` (from ``updates.py``'s ``_update_critic`` wrapper) runs the stock ``_update_critic`` on
   a controller thread, its worker group seen through ``updates.py``'s dispatch proxy. The trainer's
   thread waits only for the critic's dispatch -- its request is then serialised, so every side
   effect on the batch keeps its stock order -- and returns what the trainer expects from
   ``_update_critic`` without the critic's metrics (``TrainerAdapter.placeholder``). The actor's
   update, the checkpoint, the weight sync, validation and the next step's generation follow.
2. ``join`` waits for the update where something needs it: the next step's first call on the
   critic's pool (values; a reward model colocated there; a shared-rollout weight push), a
   checkpoint save (so it holds the updated critic and a resume stays exact), the end of ``fit``.
   values(k+1) is dispatched only after update(k) returned on every critic worker, whatever the
   worker's own call order.
3. Step k's record for verl's tracker is held (``held_records.py``, through the ``Tracking.log`` hook)
   until the join adds the critic's metrics (reduced as stock ``fit`` reduces them) and
   ``split/critic_update_hidden_s``, ``split/critic_join_wait_s`` and ``split/log_delay_s``.
4. What the update reads stays alive: v1 clears the step's TransferQueue keys at its end; that
   clear is postponed until the join (the ``transfer_queue.kv_clear`` seam).
5. A failure of the update is raised on the trainer's thread at the next point it passes (every
   seam here and in the overlaps), naming the role, the pool and the step. Should the trainer sit
   in one long call instead (a GPU generation), it is interrupted and ``fit`` raises the failure, or,
   where that cannot land, the process is ended (below), so a run never burns its GPUs on a dead critic.

Exactness: the critic's update reads only step k's batch, already sent; values(k+1) runs after it;
the checkpoint after it. So the numbers are those of the same run without the deferral.

How a run ends when the update fails while the trainer sits in one long call (step 5): the failure is raised on
the trainer's thread at the next seam it passes, and a GPU generation can last minutes with none, so from the
failure on (``watch_failure``, on the critic's thread):

1. ``INTERRUPT_AFTER_S`` later, if it has not been raised, the trainer's thread is interrupted: verl runs ``fit``
   on the main thread of its TaskRunner actor, and ``_thread.interrupt_main`` lands there as a KeyboardInterrupt
   even inside ``ray.get``, which returns to Python for it (measured in a Ray 2.60 actor: 2 s into a 30 s
   ``ray.get``, also with SIGINT ignored where the run was launched: Ray's worker has Python's own handler; a real
   SIGINT sent to that thread did nothing). ``deferral_hooks.wrap_fit`` turns it into the failure
   (``interrupted_for``), so the run ends as any verl failure does: the driver's ``ray.get`` raises, and Ray tears
   down the workers and the rollout servers.
2. ``ABORT_AFTER_S`` later, if it still has not been raised (a trainer off the main thread, SIGINT ignored), the
   process is ended (``os._exit``), the step's held metrics logged first; the last checkpoint is intact.

Both inside the 30 s a run has to stop. Once ``fit`` has ended, by the failure or otherwise, both are cancelled
(``cancel_exit_timers``, from ``deferral_hooks.wrap_fit``), and a failure watched after that starts none: a run
already tearing down is neither interrupted nor ended. (The trainer sees a failed update as soon as its future
holds the exception, before the future's callbacks run: ``fit`` can raise it and end while ``watch_failure`` is
still to start its timers.)
"""

from __future__ import annotations

import _thread
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl_split.core import metric_names as names
from verl_split.core.errors import UpdateFailedError
from verl_split.runtime.metrics import tracking
from verl_split.runtime.overlap import held_records, lanes

logger = logging.getLogger("verl_split.deferral")

#: Seconds after a failed deferred update before the trainer's thread is interrupted, if it has not
#: reached a point where it raises the failure itself.
INTERRUPT_AFTER_S = 5.0
#: Seconds after a failed deferred update before the process is ended, if the interrupt did not end the run.
ABORT_AFTER_S = 25.0


@dataclass
class _Deferred:
    """One critic update running on past its step."""

    step: Any  # updates._Step of step k: trainer, adapter, pools, the critic's and actor's intervals
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
    interrupted: bool = False  # _interrupt_if_unraised sent the trainer's thread a KeyboardInterrupt
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def global_step(self) -> int:
        return self.step.global_step

    @property
    def trainer(self) -> Any:
        return self.step.trainer


_current: _Deferred | None = None
_timers: list[threading.Timer] = []  # watch_failure's, until fit ends
_timers_lock = threading.Lock()  # watch_failure (the critic's thread) against cancel_exit_timers (fit's)
_fit_over = False  # fit has ended: a failure watched from now on starts no timer


def current() -> _Deferred | None:
    """The deferred update not yet joined, if any."""
    return _current


def running_update() -> concurrent.futures.Future | None:
    """The stock call of a deferred critic update still running (done when its workers are), if any."""
    deferred = _current
    if deferred is None or deferred.done or deferred.result.done():
        return None
    return deferred.result


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

    lanes.start_lane("verl-split-critic-update", run)
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
    result.add_done_callback(lambda _: watch_failure(deferred))
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
        held_records.emit_due()
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
    held_records.emit_due()  # on the trainer's thread: the record the join completed
    if deferred.failure is not None:
        _raise(deferred)


def raise_if_failed() -> None:
    """Raise the deferred update's failure now, if it has failed (called at every seam); on the trainer's
    thread, emit a record completed meanwhile (``held_records.emit_due``)."""
    held_records.emit_due()
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
        metrics[names.CRITIC_METRICS_MISSING] = 1.0
    metrics.update(step.metrics(final=True))
    actor_done = deferred.actor_done_at or deferred.join_started
    critic_end = step.critic.end or deferred.join_ended
    # The critic's interval in three parts: beside the actor's update, hidden behind the actor pool's
    # next work (sync, checkpoint, generation, ...), and waited for at the join.
    hidden = max(0.0, min(critic_end, deferred.join_started) - max(step.critic.start, actor_done))
    waited = max(0.0, critic_end - deferred.join_started)
    metrics[names.CRITIC_UPDATE_HIDDEN_S] = hidden
    metrics[names.CRITIC_JOIN_WAIT_S] = waited
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

    def forget() -> None:
        global _current
        if _current is deferred:
            _current = None

    held_records.complete(deferred.global_step, metrics, forget)
    for clear in deferred.postponed:
        clear()
    deferred.postponed.clear()


# -- a failure while the trainer sits in one long call: interrupt it, else end the process ---------
def watch_failure(deferred: _Deferred) -> None:
    """On the critic's thread, when its update ends: if it failed, make sure the run ends."""
    exc = deferred.result.exception()
    if exc is None:
        return
    deferred.failure = deferred.failure or _failure(deferred, exc)
    logger.error("verl-split: %s", deferred.failure)
    with _timers_lock:
        if _fit_over:
            return  # fit has ended (it may have raised this very failure): nothing is left to interrupt
        for delay, then in ((INTERRUPT_AFTER_S, _interrupt_if_unraised), (ABORT_AFTER_S, _abort_if_unraised)):
            timer = threading.Timer(delay, then, args=(deferred,))
            timer.daemon = True
            _timers.append(timer)
            timer.start()


def watch_from_now() -> None:
    """``fit`` starts: a failed deferred update may interrupt it, or end the process, from now on."""
    global _fit_over
    with _timers_lock:
        _fit_over = False


def cancel_exit_timers() -> None:
    """``fit`` has ended: stop the timers ``watch_failure`` started, and start none for a failure seen later."""
    global _fit_over
    with _timers_lock:
        _fit_over = True
        while _timers:
            _timers.pop().cancel()


def interrupted_for(deferred: _Deferred | None, exc: BaseException) -> UpdateFailedError | None:
    """The deferred failure that ``exc`` (a KeyboardInterrupt) was sent to raise, if ``watch_failure`` sent it."""
    if isinstance(exc, KeyboardInterrupt) and deferred is not None and deferred.interrupted:
        deferred.raised = True
        return deferred.failure
    return None


def _interrupt_if_unraised(deferred: _Deferred) -> None:
    if deferred.raised or deferred.trainer_thread is not threading.main_thread():
        return
    logger.error(
        "verl-split: the trainer has been in one call for %.0fs since the critic's update failed; interrupting it "
        "so that the run stops (its last checkpoint is intact).",
        INTERRUPT_AFTER_S,
    )
    deferred.interrupted = True
    _thread.interrupt_main()  # a KeyboardInterrupt on the main thread; wrap_fit turns it into the failure


def _abort_if_unraised(deferred: _Deferred) -> None:
    if deferred.raised:
        return
    logger.error(
        "verl-split: %s The trainer has been in one call for %.0fs since; ending this process so that the run "
        "stops (its last checkpoint is intact).",
        deferred.failure,
        ABORT_AFTER_S,
    )
    held_records.flush_without_critic()
    logging.shutdown()
    os._exit(1)


# -- the step's record for verl's tracker ------------------------------------------------------
def log_or_hold(step: int | None, data: dict, emit: Callable[[dict], Any]) -> bool:
    """The ``Tracking.log`` hook's holder: True when it emitted or held the record itself."""

    def pending() -> bool:
        deferred = _current
        return deferred is not None and deferred.global_step == step and names.CRITIC_UPDATE_DEFERRED in data

    done = held_records.log_or_hold(step, data, emit, pending)
    raise_if_failed()
    return done


tracking.register_holder(log_or_hold)


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


def reset() -> None:
    """Forget every deferred update, held record and timer (tests)."""
    global _current
    _current = None
    cancel_exit_timers()
    watch_from_now()
    held_records.reset()
