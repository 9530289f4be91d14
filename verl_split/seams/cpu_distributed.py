"""Start torch.distributed with plain gloo on the CPU platform.

Target: ``verl/utils/distributed.py`` ``initialize_global_process_group_ray``, which
``verl/workers/engine_workers.py`` calls without a backend; it then asks for
``f"cpu:gloo,{device}:{backend}"``, i.e. ``"cpu:gloo,cpu:gloo"`` on CPU, which torch
rejects (one device type named twice). An explicit backend passes through unchanged.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping


def _wrap_initialize_global_process_group_ray(wrapped, instance, args, kwargs):
    from verl.utils.device import get_device_name

    if get_device_name() == "cpu" and len(args) < 2 and kwargs.get("backend") is None:
        kwargs["backend"] = "gloo"
    return wrapped(*args, **kwargs)


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "initialize_global_process_group_ray", _wrap_initialize_global_process_group_ray)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "initialize_global_process_group_ray")
