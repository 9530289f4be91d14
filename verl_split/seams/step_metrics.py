"""Add verl-split's whole-step metrics to each step verl's tracker logs.

Target: ``verl/utils/tracking.py`` ``Tracking.log(data, step, ...)``, which both of verl's
trainers call once per step with the step's metrics, ``timing_s/*`` included (after
``compute_timing_metrics``). The metrics themselves: ``verl_split/step_metrics.py``. The
caller's dict is left as it was; the tracker gets a copy with the additions. A step whose
critic update runs on into the next (``verl_split/deferred_critic.py``) is logged when it joins.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, deferred_critic, step_metrics
from verl_split._args import get_argument


def _wrap_tracking_log(wrapped, instance, args, kwargs):
    data = args[0] if args else kwargs.get("data")
    if not isinstance(data, dict):
        return wrapped(*args, **kwargs)

    def emit(record: dict) -> None:
        record = {**record, **step_metrics.whole_step_metrics(record)}
        if args:
            wrapped(record, *args[1:], **kwargs)
        else:
            wrapped(*args, **{**kwargs, "data": record})

    # A step whose critic update still runs on: its record waits for the critic's metrics.
    if deferred_critic.log_or_hold(get_argument(args, kwargs, 1, "step", None), data, emit):
        return None
    emit(data)
    return None


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.Tracking, "log", _wrap_tracking_log)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.Tracking, "log")
