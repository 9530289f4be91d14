"""Hand verl 0.7/0.8 a CPU device module with the memory and RNG calls it makes.

Target: ``verl/utils/device.py`` ``get_torch_device``. Before verl 0.9 there is no
platform registry: on a host without accelerators ``get_torch_device()`` returns
``torch.cpu``, which has no ``empty_cache``, ``mem_get_info``, ``get_rng_state`` or
``manual_seed``, all of which verl's workers call. On CPU the wrapper returns
:mod:`verl_split.cpu.device` (the module 0.9's CPU platform hands out); with an
accelerator it returns what verl chose.

``import verl`` already imported ``verl/utils/device.py`` and a few modules that bound
``get_torch_device`` by name (``verl/protocol.py``, ``verl/utils/torch_functional.py``)
before verl-split is loaded on these releases, so those bindings are wrapped too;
modules imported later bind the wrapper itself.
"""

from __future__ import annotations

import sys
from types import ModuleType

from verl_split import _wrapping

_NAME = "get_torch_device"
_rebound: list[ModuleType] = []  # modules other than the target whose binding was wrapped


def _wrap_get_torch_device(wrapped, instance, args, kwargs):
    from verl.utils.device import get_device_name

    if get_device_name() == "cpu":
        from verl_split.cpu import device

        return device
    return wrapped(*args, **kwargs)


def patch(module: ModuleType) -> None:
    original = vars(module)[_NAME]
    _wrapping.wrap(module, _NAME, _wrap_get_torch_device)
    for name, loaded in list(sys.modules.items()):
        # getattr: sys.modules may hold None (an import blocked on purpose) or a non-module object.
        if name.startswith("verl.") and loaded is not module and getattr(loaded, _NAME, None) is original:
            _wrapping.wrap(loaded, _NAME, _wrap_get_torch_device)
            _rebound.append(loaded)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, _NAME)
    while _rebound:
        _wrapping.unwrap(_rebound.pop(), _NAME)
