"""Add verl-split's whole-step metrics to each step verl's tracker logs.

Target: ``verl/utils/tracking.py`` ``Tracking.log(data, step, ...)``, which both of verl's
trainers call once per step with the step's metrics, ``timing_s/*`` included (after
``compute_timing_metrics``). The metrics themselves: ``verl_split/step_metrics.py``. The
caller's dict is left as it was; the tracker gets a copy with the additions.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, step_metrics


def _wrap_tracking_log(wrapped, instance, args, kwargs):
    data = args[0] if args else kwargs.get("data")
    if not isinstance(data, dict):
        return wrapped(*args, **kwargs)
    extra = step_metrics.whole_step_metrics(data)
    if not extra:
        return wrapped(*args, **kwargs)
    data = {**data, **extra}
    if args:
        return wrapped(data, *args[1:], **kwargs)
    return wrapped(*args, **{**kwargs, "data": data})


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.Tracking, "log", _wrap_tracking_log)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.Tracking, "log")
