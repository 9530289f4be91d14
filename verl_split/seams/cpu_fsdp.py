"""Keep FSDP2 forward-only models' CPU offload from pinning memory.

Targets: ``verl/workers/engine/fsdp/transformer_impl.py`` ``_build_fsdp_module`` and, on
verl 0.7, the legacy ``verl/workers/fsdp_workers.py`` ``_build_model_optimizer`` (seam
``cpu_fsdp_legacy``). Both build ``CPUOffloadPolicy(pin_memory=True)`` for forward-only
models (the reference policy) whatever the device; pinned memory needs a CUDA driver.
The seam wraps the module's ``CPUOffloadPolicy`` name so every policy it builds on CPU
has ``pin_memory=False``; on other devices it builds what verl asked for.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping


def _wrap_cpu_offload_policy(wrapped, instance, args, kwargs):
    from verl.utils.device import get_device_name

    if get_device_name() == "cpu":
        kwargs["pin_memory"] = False
        args = ()  # pin_memory is the policy's only argument
    return wrapped(*args, **kwargs)


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "CPUOffloadPolicy", _wrap_cpu_offload_policy)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "CPUOffloadPolicy")
