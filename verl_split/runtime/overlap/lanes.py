"""What the three overlaps share: a lane's interval, the controller threads and their pass-through flags,
the timeline of the lanes, and the hand-off of the preparation's metrics to the step's update.

A *lane* is one pool's share of a phase (the critic's values, the actor's old_log_prob + ref, each
update). An overlap runs one lane of a stock trainer method on a controller thread; that thread calls
the same wrapped method, which must then pass straight through to verl: ``passthrough(name)`` marks the
thread, ``passing_through(name)`` asks. (OpenTelemetry's ``suppress_instrumentation`` does the same.)
Standard library only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from verl_split.core import settings
from verl_split.runtime.metrics.timeline import Timeline

logger = logging.getLogger("verl_split.timeline")

_flags = threading.local()


@contextlib.contextmanager
def passthrough(name: str) -> Iterator[None]:
    """On this thread, for the ``with`` block, the wrappers that ask ``passing_through(name)`` step aside."""
    previous = getattr(_flags, name, False)
    setattr(_flags, name, True)
    try:
        yield
    finally:
        setattr(_flags, name, previous)


def passing_through(name: str) -> bool:
    return getattr(_flags, name, False)


def start_lane(name: str, run: Callable[[], None]) -> threading.Thread:
    """Run one lane on a controller thread. A daemon thread, not an executor: a failed step must not keep
    the process from exiting."""
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


@dataclass
class Interval:
    """When a lane ran, on ``time.monotonic()`` (the clock of the timeline and of the test plugins)."""

    start: float = 0.0
    end: float = 0.0

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


def shared_seconds(a: Interval, b: Interval) -> float:
    """How long two lanes ran at once."""
    return max(0.0, min(a.end, b.end) - max(a.start, b.start))


_timelines: dict[str, Timeline] = {}
#: Trace files that could not be written: the timeline is off for them, the run goes on.
_unwritable: set[str] = set()


def record_interval(name: str, lane: str, interval: Interval) -> None:
    """Add one interval to the ``VERL_SPLIT_TRACE`` timeline, if one is asked for.

    A trace is a diagnostic: a file that cannot be written (a read-only or full disk, a folder that is a file)
    turns the timeline off with one warning and never fails the training step that recorded it.
    """
    path = settings.current().trace_path
    if not path or path in _unwritable:
        return
    first = path not in _timelines
    timeline = _timelines.setdefault(path, Timeline(path))
    timeline.add(name, lane, interval.start, interval.end)
    try:
        timeline.flush()
    except OSError as exc:
        _unwritable.add(path)
        logger.warning(
            "VERL_SPLIT_TRACE: cannot write the timeline to %s on %s (%s); no timeline for this run, training "
            "goes on. Point VERL_SPLIT_TRACE at a writable file on the node verl's TaskRunner runs on.",
            os.path.abspath(path),
            socket.gethostname(),
            exc,
        )
        return
    if first:  # on a cluster the trainer's node is Ray's choice: say where the file is
        logger.info("timeline: %s on %s", os.path.abspath(path), socket.gethostname())


# The preparation's metrics wait on the trainer until the step's update reports them with its own.
_PREP_METRICS_ATTR = "_verl_split_prep_metrics"


def hand_over_metrics(trainer: Any, metrics: dict[str, float]) -> None:
    vars(trainer).setdefault(_PREP_METRICS_ATTR, {}).update(metrics)


def take_metrics(trainer: Any) -> dict[str, float]:
    """The ``split/prep_*`` metrics of the trainer's last preparation, once."""
    return vars(trainer).pop(_PREP_METRICS_ATTR, {})
