"""How a run ends when a deferred critic update fails while the trainer sits in one long call.

``deferral.py`` raises such a failure on the trainer's thread at the next seam it passes. A GPU generation can
last minutes with none, so from the failure on (``watch``, on the critic's thread):

1. ``INTERRUPT_AFTER_S`` later, if it has not been raised, the trainer's thread is interrupted: verl runs ``fit``
   on the main thread of its TaskRunner actor, and ``_thread.interrupt_main`` lands there as a KeyboardInterrupt
   even inside ``ray.get``, which returns to Python for it (measured in a Ray 2.60 actor: 2 s into a 30 s
   ``ray.get``, also with SIGINT ignored where the run was launched: Ray's worker has Python's own handler; a real
   SIGINT sent to that thread did nothing). ``deferral_hooks.wrap_fit``
   turns it into the failure (``interrupted_for``), so the run ends as any verl failure does: the driver's
   ``ray.get`` raises, and Ray tears down the workers and the rollout servers.
2. ``ABORT_AFTER_S`` later, if it still has not been raised (a trainer off the main thread, SIGINT ignored), the
   process is ended (``os._exit``), the step's held metrics logged first; the last checkpoint is intact.

Both inside the 30 s a run has to stop. Once ``fit`` has ended, by the failure or otherwise, both are cancelled
(``cancel``, from ``deferral_hooks.wrap_fit``): a run already tearing down is neither interrupted nor ended.
"""

from __future__ import annotations

import _thread
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from verl_split.core.errors import UpdateFailedError
from verl_split.runtime.overlap import held_records

logger = logging.getLogger("verl_split.deferral")

#: Seconds after a failed deferred update before the trainer's thread is interrupted, if it has not
#: reached a point where it raises the failure itself.
INTERRUPT_AFTER_S = 5.0
#: Seconds after a failed deferred update before the process is ended, if the interrupt did not end the run.
ABORT_AFTER_S = 25.0

_timers: list[threading.Timer] = []


def watch(deferred: Any, failure: Callable[[Any, BaseException], UpdateFailedError]) -> None:
    """On the critic's thread, when its update ends: if it failed, make sure the run ends."""
    exc = deferred.result.exception()
    if exc is None:
        return
    deferred.failure = deferred.failure or failure(deferred, exc)
    logger.error("verl-split: %s", deferred.failure)
    for delay, then in ((INTERRUPT_AFTER_S, _interrupt_if_unraised), (ABORT_AFTER_S, _abort_if_unraised)):
        timer = threading.Timer(delay, then, args=(deferred,))
        timer.daemon = True
        _timers.append(timer)
        timer.start()


def cancel() -> None:
    """``fit`` has ended: stop the timers ``watch`` started."""
    while _timers:
        _timers.pop().cancel()


def interrupted_for(deferred: Any, exc: BaseException) -> UpdateFailedError | None:
    """The deferred failure that ``exc`` (a KeyboardInterrupt) was sent to raise, if this module sent it."""
    if isinstance(exc, KeyboardInterrupt) and deferred is not None and deferred.interrupted:
        deferred.raised = True
        return deferred.failure
    return None


def _interrupt_if_unraised(deferred: Any) -> None:
    if deferred.raised or deferred.trainer_thread is not threading.main_thread():
        return
    logger.error(
        "verl-split: the trainer has been in one call for %.0fs since the critic's update failed; interrupting it "
        "so that the run stops (its last checkpoint is intact).",
        INTERRUPT_AFTER_S,
    )
    deferred.interrupted = True
    _thread.interrupt_main()  # a KeyboardInterrupt on the main thread; wrap_fit turns it into the failure


def _abort_if_unraised(deferred: Any) -> None:
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
