"""Let verl 0.7.0's file logger write the metrics verl's own trainer hands it (the CPU dry run reads them).

Target: ``verl/utils/tracking.py`` ``FileLogger.log`` on verl 0.7.0, which writes ``json.dumps`` of the step's
metrics (``tracking.py:250``) and so fails on the numbers verl 0.7.0's own ``fit`` puts there: its
sequence-balance metrics are torch tensors (``ray_trainer.py:1139`` passes the tensor ``global_seqlen_lst``),
others numpy scalars such as ``int32``. A 0.7.0 run with ``trainer.logger`` including ``file`` stops at its
first step, with or without verl-split; 0.7.1 writes with orjson's numpy option and passes lists
(``ray_trainer.py:1084``). The dry run reads every step from that file (``verl_split/runner.py``), so in CPU
mode the wrapper hands ``FileLogger.log`` a copy of the metrics with those values as plain Python numbers.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from verl_split import _wrapping
from verl_split._args import get_argument


def _plain(value: Any) -> Any:
    """A numpy scalar or a one-element tensor as a Python number; anything else as it is."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (ValueError, RuntimeError):  # more than one element: left to verl's logger, as stock
            return value
    return value


def _wrap_file_logger_log(wrapped, instance, args, kwargs):
    data = get_argument(args, kwargs, 0, "data", None)
    if not isinstance(data, dict):
        return wrapped(*args, **kwargs)
    plain = {key: _plain(value) for key, value in data.items()}
    step = get_argument(args, kwargs, 1, "step", None)
    return wrapped(plain, step)


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.FileLogger, "log", _wrap_file_logger_log)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.FileLogger, "log")
