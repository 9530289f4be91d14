"""verl's platform for a machine without accelerators: CPU tensors, gloo collectives.

Registered with ``verl.plugin.platform.PlatformRegistry`` under the name ``cpu`` by the
``cpu_platform`` seam, and chosen with ``VERL_PLATFORM=cpu``. Ray still hands out
logical GPUs (``ray_init.num_gpus``), so verl's resource pools, placement groups and
GPU-count checks work unchanged; each logical GPU is one CPU worker process.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType
from typing import Any

from verl.plugin.platform.platform_base import PlatformBase

#: The name ``VERL_PLATFORM`` selects this platform by.
PLATFORM_NAME = "cpu"


class PlatformCPU(PlatformBase):
    """CPU devices, gloo collectives, logical Ray GPUs; profiling and IPC are off."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        from verl_split.runtime.cpu import device

        return device

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: only VERL_PLATFORM=cpu selects it, so a GPU machine
        # with verl-split installed keeps its own platform.
        return False

    def current_device(self) -> str:  # type: ignore[override]
        # verl passes this straight to ``.to(device=...)``/``torch.tensor(device=...)``,
        # where a bare int means an accelerator index; "cpu" is what torch.cpu answers too.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        """A CPU process has one device; nothing to select."""

    def synchronize(self, device_index: int | None = None) -> None:
        """CPU kernels run synchronously."""

    def manual_seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """The host allocator takes no settings (verl toggles expandable segments)."""

    def empty_cache(self) -> None:
        """Nothing is cached on the host."""

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for actors holding logical GPUs; verl reads it to find local ranks.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        """No device profiler on the host."""

    def profiler_stop(self) -> None:
        """No device profiler on the host."""

    def ray_resource_name(self) -> str:
        # Logical GPUs: verl's pools, placement groups and GPU-count checks work as on GPUs.
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
