"""Register verl-split's CPU platform with verl's platform registry.

Target: ``verl/plugin/platform/platform_manager.py`` ``PlatformRegistry``: verl picks
a platform by ``VERL_PLATFORM`` (or by probing), and ships none for CPU-only hosts.
A registry entry is the seam verl offers for this, so nothing is wrapped here. The
variables a CPU run needs (``settings.CPU_MODE_VARIABLES``) are also defaulted into
this process's environment, so ``VERL_SPLIT_CPU=1`` alone selects the platform here
and in the Ray workers of a local cluster, which inherit it.
"""

from __future__ import annotations

import os
from types import ModuleType

from verl_split import settings

_defaulted: dict[str, str] = {}  # variables this seam set, to take back on unpatch


def patch(module: ModuleType) -> None:
    from verl_split.cpu.platform import PLATFORM_NAME, PlatformCPU

    for key, value in settings.CPU_MODE_VARIABLES.items():
        if key not in os.environ:
            os.environ[key] = value
            _defaulted[key] = value
    if module.PlatformRegistry.get(PLATFORM_NAME) is not PlatformCPU:
        module.PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)


def unpatch(module: ModuleType) -> None:
    from verl_split.cpu.platform import PLATFORM_NAME, PlatformCPU

    if module.PlatformRegistry.get(PLATFORM_NAME) is PlatformCPU:
        del module.PlatformRegistry._platforms[PLATFORM_NAME]
    for key, value in list(_defaulted.items()):
        if os.environ.get(key) == value:
            del os.environ[key]
        del _defaulted[key]
