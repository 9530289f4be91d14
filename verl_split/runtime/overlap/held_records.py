"""A step's record for verl's tracker, held while its critic update runs on into the next step.

verl logs step k's metrics at the end of step k (``Tracking.log``); with the critic's update deferred
(``deferral.py``) its metrics come at the join, in step k+1. The ``Tracking.log`` hook
(``runtime/metrics/tracking.py``) asks ``deferral.log_or_hold``, which holds the record here until the
join hands over the critic's metrics; a join that comes first (a checkpoint save) leaves them ready for
the record instead. One lock covers both hands, so a record logged while another thread joins finds
one or the other.

A record is emitted on the thread that logged it, the trainer's: verl's trackers (wandb, mlflow, the
file logger) are called from that thread only, as stock. A join on another thread (the values lane of
step k+1) leaves the completed record *due*; the trainer's thread emits it at the next seam it passes
(``emit_due``: the values join, the next update, the next record, the end of ``fit``), still before step
k+1's own record. Standard library only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl_split.core import metric_names as names

logger = logging.getLogger("verl_split.deferral")


@dataclass
class _Held:
    data: dict
    emit: Callable[[dict], Any]
    held_at: float
    thread: threading.Thread  # the trainer's: the one that logged it, and the one that emits it


_lock = threading.Lock()
_held: dict[int, _Held] = {}  # step -> its record, waiting for its critic's metrics
_ready: dict[int, dict] = {}  # step -> the critic's metrics of a joined update whose record is not logged yet
_due: list[tuple[int, _Held, dict]] = []  # completed off the trainer's thread: emitted by it at its next seam


def log_or_hold(step: int | None, data: dict, emit: Callable[[dict], Any], pending: Callable[[], bool]) -> bool:
    """Emit the record with metrics ready for it, or hold it while ``pending()``; False: neither."""
    emit_due()  # a completed earlier step first: records keep their order
    with _lock:
        ready = _ready.pop(step, None)
        hold = ready is None and pending()
        if hold:
            _held[step] = _Held(dict(data), emit, time.monotonic(), threading.current_thread())
    if ready is not None:
        emit({**data, **ready})
        return True
    return hold


def complete(step: int, metrics: dict, done: Callable[[], None]) -> None:
    """The join's side: log the held record with ``metrics``, or keep them ready; ``done()`` runs under the lock."""
    with _lock:
        held = _held.pop(step, None)
        if held is None:
            _ready[step] = metrics
        elif held.thread is not threading.current_thread():
            _due.append((step, held, metrics))
            held = None
        done()
    if held is not None:
        _emit(held, metrics)


def emit_due(any_thread: bool = False) -> None:
    """Emit the records completed on another thread, if this is the thread that logged them (or, as the
    process ends, ``any_thread``)."""
    if not _due:
        return
    me = threading.current_thread()
    with _lock:
        mine = [entry for entry in _due if any_thread or entry[1].thread is me]
        _due[:] = [entry for entry in _due if entry not in mine]
    for _, held, metrics in sorted(mine, key=lambda entry: entry[0]):
        _emit(held, metrics)


def _emit(held: _Held, metrics: dict) -> None:
    held.emit({**held.data, **metrics, names.LOG_DELAY_S: time.monotonic() - held.held_at})


def flush_without_critic() -> None:
    """Log held records as they are (the run is ending on an error): the step's other metrics are not lost."""
    emit_due(any_thread=True)  # completed ones with their critic's metrics
    with _lock:
        records = sorted(_held.items())
        _held.clear()
    for step, held in records:
        try:
            _emit(held, {names.CRITIC_METRICS_MISSING: 1.0})
        except Exception:  # the run is failing already; say so and keep the first error
            logger.exception("could not log the held metrics of step %s", step)


def reset() -> None:
    """Forget every held record and ready metrics (tests)."""
    with _lock:
        _held.clear()
        _ready.clear()
        _due.clear()
