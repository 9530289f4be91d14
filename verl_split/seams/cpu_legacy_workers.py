"""Start verl 0.7's legacy FSDP workers' process group with gloo on the CPU device.

Target: ``verl/workers/fsdp_workers.py`` ``ActorRolloutRefWorker.__init__`` and
``CriticWorker.__init__``. Each starts torch.distributed itself unless it is already
started, with a backend built for accelerators: ``f"cpu:gloo,{device}:{nccl}"`` for the
actor (``"cpu:gloo,cpu:nccl"`` on CPU, which torch rejects: one device type named
twice) and ``get_nccl_backend()`` (``"nccl"``) for the critic. On CPU the wrapper first
starts it through verl's own ``verl.utils.distributed.initialize_global_process_group_ray``
with the same rank, world size, init method and timeout (``nccl_timeout``), and the
``gloo`` backend (on 0.7.0, whose function takes no backend, ``cpu_distributed.start_gloo`` does the
same); verl's constructor then finds it started and goes on unchanged.
Subclasses (``AsyncActorRolloutRefWorker``) inherit the wrapped constructor.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping
from verl_split._args import get_argument

_CLASSES = ("ActorRolloutRefWorker", "CriticWorker")
#: verl's default for ``nccl_timeout`` in these constructors (seconds).
_DEFAULT_TIMEOUT_S = 600


def _wrap_init(wrapped, instance, args, kwargs):
    from verl.utils.device import get_device_name

    if get_device_name() == "cpu":
        from verl.utils.distributed import initialize_global_process_group_ray

        from verl_split.seams.cpu_distributed import start_gloo, takes_backend

        config = get_argument(args, kwargs, 0, "config")
        timeout = config.get("nccl_timeout", _DEFAULT_TIMEOUT_S)
        if takes_backend(initialize_global_process_group_ray):
            initialize_global_process_group_ray(timeout_second=timeout, backend="gloo")
        else:
            start_gloo(timeout)
    return wrapped(*args, **kwargs)


def patch(module: ModuleType) -> None:
    for name in _CLASSES:
        _wrapping.wrap(getattr(module, name), "__init__", _wrap_init)


def unpatch(module: ModuleType) -> None:
    for name in _CLASSES:
        _wrapping.unwrap(getattr(module, name), "__init__")
