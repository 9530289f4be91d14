"""Let verl 0.8's FSDP engines run on the CPU device.

Target: ``verl/workers/engine/fsdp/transformer_impl.py``, whose engines register in
``verl/workers/engine/base.py`` ``EngineRegistry`` for devices ``cuda`` and ``npu``
only; ``EngineRegistry.get_engine_cls`` looks them up by ``get_device_name()``, which
is ``cpu`` here. verl 0.9 has a knob for this (``VERL_ENGINE_DEVICE``), 0.8 does not.
The registry is the seam verl offers, so the engines already registered for ``cuda``
are also entered for ``cpu``: the same classes, which run on whatever device verl
names. Nothing is wrapped.
"""

from __future__ import annotations

from types import ModuleType

_added: list[dict] = []  # the per-backend device tables an entry was added to


def patch(module: ModuleType) -> None:
    for backends in module.EngineRegistry._engines.values():
        for devices in backends.values():
            if "cuda" in devices and "cpu" not in devices:
                devices["cpu"] = devices["cuda"]
                _added.append(devices)


def unpatch(module: ModuleType) -> None:
    while _added:
        devices = _added.pop()
        if devices.get("cpu") is devices.get("cuda"):
            del devices["cpu"]
