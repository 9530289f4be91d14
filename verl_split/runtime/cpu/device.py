"""The ``torch.<device>``-like module verl's CPU platform hands out as ``device_module``.

verl calls ``get_torch_device().<name>()`` for memory, streams and RNG state (e.g.
``empty_cache``, ``mem_get_info``, ``get_rng_state``). ``torch.cpu`` has the stream and
device functions but not the memory or RNG ones, so this module adds them: memory
calls report what the host has, caches have nothing to empty, and the RNG state is
the CPU generator's.
"""

from __future__ import annotations

import os

import torch
from torch.cpu import (  # noqa: F401  (re-exported for verl)
    Event,
    Stream,
    StreamContext,
    current_stream,
    device_count,
    is_available,
    set_device,
    stream,
    synchronize,
)


def current_device() -> str:
    # As torch.cpu.current_device(): verl passes it to ``.to(device=...)``, where an int means an accelerator.
    return "cpu"


def get_device_name(device: object = None) -> str:
    return "cpu"


def empty_cache() -> None:
    """Nothing is cached on the host."""


def ipc_collect() -> None:
    """No inter-process memory handles on the host."""


def set_per_process_memory_fraction(fraction: float, device: object = None) -> None:
    """The host has no per-process memory cap to set."""


def reset_peak_memory_stats(device: object = None) -> None:
    """No allocator statistics on the host."""


def memory_allocated(device: object = None) -> int:
    return 0


def max_memory_allocated(device: object = None) -> int:
    return 0


def memory_reserved(device: object = None) -> int:
    return 0


def max_memory_reserved(device: object = None) -> int:
    return 0


def mem_get_info(device: object = None) -> tuple[int, int]:
    """(free, total) bytes of host memory, as ``torch.cuda.mem_get_info`` reports a GPU's."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def get_rng_state(device: object = None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(state: torch.Tensor, device: object = None) -> None:
    torch.set_rng_state(state)


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    torch.manual_seed(seed)
