"""Start torch.distributed with plain gloo on the CPU platform.

Target: ``verl/utils/distributed.py`` ``initialize_global_process_group_ray``, which
``verl/workers/engine_workers.py`` calls without a backend; it then asks for
``f"cpu:gloo,{device}:{backend}"``, i.e. ``"cpu:gloo,cpu:gloo"`` on CPU, which torch
rejects (one device type named twice). An explicit backend passes through unchanged.

verl 0.7.0's function takes no ``backend`` (``verl/utils/distributed.py:74``, added in 0.7.1): there the
wrapper starts the process group with gloo itself, from the same ``RANK`` / ``WORLD_SIZE`` /
``DIST_INIT_METHOD`` variables, and verl's function then finds it started.
"""

from __future__ import annotations

import inspect
import os
from datetime import timedelta
from types import ModuleType

from verl_split import _wrapping


def takes_backend(function) -> bool:
    """verl's ``initialize_global_process_group_ray`` takes a ``backend`` (0.7.1+)."""
    return "backend" in inspect.signature(function).parameters


def start_gloo(timeout_second: float | None) -> None:
    """Start torch.distributed with gloo as Ray workers' environment describes it, unless started."""
    import torch.distributed

    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            backend="gloo",
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            timeout=timedelta(seconds=timeout_second) if timeout_second is not None else None,
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )


def _wrap_initialize_global_process_group_ray(wrapped, instance, args, kwargs):
    from verl.utils.device import get_device_name

    if get_device_name() == "cpu" and len(args) < 2 and kwargs.get("backend") is None:
        if takes_backend(wrapped):
            kwargs["backend"] = "gloo"
        else:
            start_gloo(args[0] if args else kwargs.get("timeout_second"))
    return wrapped(*args, **kwargs)


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "initialize_global_process_group_ray", _wrap_initialize_global_process_group_ray)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "initialize_global_process_group_ray")
