"""The vLLM general-plugin entry point: vLLM imports this module in every process it starts.

vLLM loads its ``vllm.general_plugins`` entry points in the API server, the engine core and each spawned worker
(``vllm.plugins.load_general_plugins``); the worker is where a model's weights are loaded and processed, and only
an entry point reaches it. With ``VERL_SPLIT_CPU`` unset, or on any platform but vLLM's CPU one, ``register``
returns and nothing is changed: GPU runs never see it.
"""

from __future__ import annotations

import os


def register() -> None:
    from verl_split.core import settings

    if not settings.parse_switch("VERL_SPLIT_CPU", os.environ.get("VERL_SPLIT_CPU"), False):
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from verl_split.runtime.cpu import vllm_weights

    vllm_weights.keep_plain_weights()
