"""The CPU dry run inside verl's training workers: process groups, FSDP, the value model, attention.

Each wrapper answers one verl function that assumes an accelerator, and steps aside on any other device
(``cpu_only``); ``seams.py`` names its target and the releases it applies to.

* ``wrap_initialize_global_process_group_ray`` -- ``verl/utils/distributed.py``: verl's engine workers call
  it without a backend and it then asks for ``"cpu:gloo,{device}:{backend}"``, ``"cpu:gloo,cpu:gloo"`` on CPU,
  which torch rejects (one device type named twice): plain gloo instead. verl 0.7.0's function takes no
  ``backend`` (added in 0.7.1): there gloo is started from the same ``RANK`` /
  ``WORLD_SIZE`` / ``DIST_INIT_METHOD`` and verl's function finds it started.
* ``wrap_legacy_worker_init`` -- 0.7's legacy ``fsdp_workers.ActorRolloutRefWorker.__init__`` and
  ``CriticWorker.__init__`` start torch.distributed with ``"cpu:gloo,cpu:nccl"`` / ``"nccl"``: on CPU the
  process group is started first with gloo, through verl's own function where it takes a backend, with the
  constructor's rank, world size, init method and ``nccl_timeout``; subclasses inherit the wrapper.
* ``wrap_cpu_offload_policy`` -- the ``CPUOffloadPolicy`` name in ``engine/fsdp/transformer_impl.py`` (and 0.7's
  ``fsdp_workers.py``): forward-only FSDP2 models (the reference policy) get ``pin_memory=True``, which needs a
  CUDA driver; ``pin_memory=False`` on CPU.
* ``wrap_get_attention_functions`` -- 0.7/0.8's ``verl/utils/attention_utils.py``, which imports
  ``flash_attn.bert_padding`` on any non-NPU host; on CPU the pure-torch un/padding helpers transformers ships
  (``modeling_flash_attention_utils.py``, same signatures), flash-attn's ``index_first_axis`` (rows of a
  flattened tensor: transformers' function of that name flattens first, which broke verl 0.7's remove-padding
  path) and einops' ``rearrange``, as verl 0.9 falls back to.
* ``register_cpu_engines`` -- 0.8's ``EngineRegistry`` (``verl/workers/engine/base.py``) holds the FSDP engines
  for ``cuda`` and ``npu`` only and looks them up by ``get_device_name()``; the same classes are entered for
  ``cpu`` (verl 0.9 has the ``VERL_ENGINE_DEVICE`` knob for this, 0.8 has not). Nothing is wrapped.
"""

from __future__ import annotations

import inspect
import os
from datetime import timedelta
from types import ModuleType

from verl_split.plugin.args import get_argument
from verl_split.plugin.seam import Undo
from verl_split.runtime.cpu import cpu_only

#: verl's default for ``nccl_timeout`` in the legacy workers' constructors (seconds).
_DEFAULT_TIMEOUT_S = 600


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


@cpu_only
def wrap_initialize_global_process_group_ray(wrapped, instance, args, kwargs):
    if len(args) < 2 and kwargs.get("backend") is None:  # an explicit backend passes through unchanged
        if takes_backend(wrapped):
            kwargs["backend"] = "gloo"
        else:
            start_gloo(args[0] if args else kwargs.get("timeout_second"))
    return wrapped(*args, **kwargs)


@cpu_only
def wrap_legacy_worker_init(wrapped, instance, args, kwargs):
    from verl.utils.distributed import initialize_global_process_group_ray

    timeout = get_argument(args, kwargs, 0, "config").get("nccl_timeout", _DEFAULT_TIMEOUT_S)
    if takes_backend(initialize_global_process_group_ray):
        initialize_global_process_group_ray(timeout_second=timeout, backend="gloo")
    else:
        start_gloo(timeout)
    return wrapped(*args, **kwargs)


@cpu_only
def wrap_cpu_offload_policy(wrapped, instance, args, kwargs):
    kwargs["pin_memory"] = False
    return wrapped(**kwargs)  # pin_memory is the policy's only argument


def _rearrange(*args, **kwargs):
    # Imported on first use, as verl 0.9 does: einops is not a dependency of the padding helpers.
    from einops import rearrange

    return rearrange(*args, **kwargs)


def _index_first_axis(tensor, indices):
    # flash-attn's index_first_axis: rows of an already flattened (total, ...) tensor, as verl 0.7's remove-padding
    # path calls it (verl/workers/actor/dp_actor.py `index_first_axis(rearrange(x, "b s ... -> (b s) ..."), i)`).
    # transformers' _index_first_axis flattens (batch, seq) itself first: another contract.
    return tensor[indices]


@cpu_only
def wrap_get_attention_functions(wrapped, instance, args, kwargs):
    from transformers.modeling_flash_attention_utils import _pad_input, _unpad_input

    return _index_first_axis, _pad_input, _rearrange, _unpad_input


def register_cpu_engines(target: ModuleType, undo: Undo) -> None:
    for backends in target.EngineRegistry._engines.values():
        for devices in backends.values():
            if "cuda" in devices and "cpu" not in devices:
                undo.setitem(devices, "cpu", devices["cuda"])
