"""CPU dry run: a CPU platform for verl and a Hugging Face stand-in for vLLM/SGLang.

Loaded only when ``VERL_SPLIT_CPU`` is on (by the seams of ``seams.py``), or by the demo and the tests;
importing this package imports nothing heavy. ``cpu_only`` is the one check of the device every CPU
wrapper makes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def on_cpu() -> bool:
    """verl runs on the CPU device in this process (its own answer, ``verl.utils.device``)."""
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


def cpu_only(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """A wrapt wrapper that acts on the CPU device only; with an accelerator verl's function runs as it is."""

    @functools.wraps(wrapper)
    def on_the_cpu_device(wrapped, instance, args, kwargs):
        if not on_cpu():
            return wrapped(*args, **kwargs)
        return wrapper(wrapped, instance, args, kwargs)

    return on_the_cpu_device
