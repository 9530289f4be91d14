"""The hook on verl's tracker: every step's record gets the whole-step metrics before it is logged.

Target: ``verl/utils/tracking.py`` ``Tracking.log(data, step, ...)``, which both of verl's trainers call
once per step with the step's metrics, ``timing_s/*`` included (after ``compute_timing_metrics``). The
caller's dict is left as it was; the tracker gets a copy with ``whole_step.whole_step_metrics`` added.
A feature that completes a step's record later registers a *holder* (``register_holder``): the deferred
critic update (``runtime/overlap/deferral.py``) holds a step's record until its critic's metrics come.
A feature whose metrics verl's trainer has no place for registers a *source* (``register_source``): what it
returns is added to the record before any holder sees it (shared rollout on ``RayPPOTrainer``, which has no
``_pending_sync_metrics`` as the v1 trainer has), and unregisters it (``unregister_source``) when its trainer is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl_split.plugin.args import get_argument
from verl_split.runtime.metrics.whole_step import whole_step_metrics

#: ``holder(step, data, emit) -> bool``: True when it logged or kept the record itself (``emit`` logs it).
Holder = Callable[[Any, dict, Callable[[dict], None]], bool]
_holders: list[Holder] = []
#: ``source(data) -> dict``: metrics to add to the record ``data`` (empty: none).
Source = Callable[[dict], dict]
_sources: list[Source] = []


def register_holder(holder: Holder) -> None:
    """Let ``holder`` see (and hold back) each record before it is logged; once per holder."""
    if holder not in _holders:
        _holders.append(holder)


def register_source(source: Source) -> None:
    """Let ``source`` add metrics to each record before it is logged or held; once per source."""
    if source not in _sources:
        _sources.append(source)


def unregister_source(source: Source) -> None:
    """Stop asking ``source`` (a source tied to one trainer, once that trainer is gone); unknown: nothing."""
    if source in _sources:
        _sources.remove(source)


def wrap_tracking_log(wrapped, instance, args, kwargs):
    data = args[0] if args else kwargs.get("data")
    if not isinstance(data, dict):
        return wrapped(*args, **kwargs)
    for source in list(_sources):
        added = source(data)
        if added:
            data = {**data, **added}  # a copy: the caller's dict is left as it was

    def emit(record: dict) -> None:
        record = {**record, **whole_step_metrics(record)}
        if args:
            wrapped(record, *args[1:], **kwargs)
        else:
            wrapped(*args, **{**kwargs, "data": record})

    step = get_argument(args, kwargs, 1, "step", None)
    if any(holder(step, data, emit) for holder in _holders):
        return None
    emit(data)
    return None
