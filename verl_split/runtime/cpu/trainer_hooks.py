"""The CPU dry run around verl's trainer: the device, the platform, the rollout, the logger and the poll.

``seams.py`` names each target and the releases it applies to.

* ``wrap_get_torch_device`` and ``rebind_get_torch_device`` -- before verl 0.9 there is no platform registry:
  on a host without accelerators ``verl/utils/device.py`` ``get_torch_device()`` returns ``torch.cpu``, which
  has no ``empty_cache``, ``mem_get_info``, ``get_rng_state`` or ``manual_seed``, all of which verl's workers
  call. On CPU the wrapper returns ``runtime/cpu/device.py`` (the module 0.9's CPU platform hands out).
  ``import verl`` already bound the name in a few modules (``verl/protocol.py``, ``utils/torch_functional.py``)
  before verl-split loads on these releases, so those bindings are wrapped too.
* ``register_platform`` -- 0.9's ``PlatformRegistry`` (``verl/plugin/platform/platform_manager.py``) picks a
  platform by ``VERL_PLATFORM`` and ships none for CPU-only hosts: verl-split's CPU platform is registered,
  and the variables a CPU run needs (``settings.CPU_MODE_VARIABLES``) are defaulted into this process's
  environment, which a local Ray cluster's workers inherit.
* ``register_worker_rollout`` and ``register_replica_rollout`` -- verl has no CPU rollout; its two registries
  are the seams it offers for one (``rollout.name=cpu_hf``): ``verl/workers/rollout/base.py``
  ``_ROLLOUT_REGISTRY`` (the worker-side class, by ``(name, mode)``) and ``verl/workers/rollout/replica.py``
  ``RolloutReplicaRegistry`` (the trainer-side replica). One seam each, so either module may load first.
* ``wrap_file_logger_log`` -- verl 0.7.0's ``FileLogger.log`` writes ``json.dumps`` of the metrics
  (``tracking.py``) and so fails on the tensors and numpy scalars its own ``fit`` logs (``ray_trainer.py``,
  ``RayPPOTrainer._balance_batch``'s ``log_seqlen_unbalance`` stats; 0.7.1 fixed both); the dry run reads
  every step from that file, so in CPU mode the logger gets them as plain numbers.
* ``wrap_replay_buffer_init`` -- verl 0.9's v1 trainer waits for finished rollouts by polling TransferQueue
  every ``ReplayBuffer.poll_interval`` seconds, 2.0 and not set from the config, so ``timing_s/gen`` comes in
  multiples of 2 s; in CPU mode the buffer polls every ``CPU_POLL_S`` (a GPU run keeps verl's 2 s;
  docs/known-limits.md says what that costs a step).
"""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Any

from verl_split.core import settings
from verl_split.plugin.args import get_argument
from verl_split.plugin.seam import Undo
from verl_split.runtime.cpu import cpu_only

#: Seconds between polls of v1's replay buffer in CPU mode: a finished generation waits at most this long.
CPU_POLL_S = 0.05
#: (rollout.name, rollout.mode) of the CPU rollout (``rollout.py``, which imports torch and verl: not loaded here).
ROLLOUT_KEY = ("cpu_hf", "async")
_ADAPTER = "verl_split.runtime.cpu.rollout.CPURolloutAdapter"  # rollout.ADAPTER_FQN


@cpu_only
def wrap_get_torch_device(wrapped, instance, args, kwargs):
    from verl_split.runtime.cpu import device

    return device


def rebind_get_torch_device(target: ModuleType, undo: Undo) -> None:
    """Wrap the ``get_torch_device`` that modules imported before verl-split bound by name."""
    original = vars(target)["get_torch_device"].__wrapped__  # the seam's Wrap ran first
    for name, loaded in list(sys.modules.items()):
        # getattr: sys.modules may hold None (an import blocked on purpose) or a non-module object.
        if name.startswith("verl.") and loaded is not target and getattr(loaded, "get_torch_device", None) is original:
            undo.wrap(loaded, "get_torch_device", wrap_get_torch_device)


def register_platform(target: ModuleType, undo: Undo) -> None:
    from verl_split.runtime.cpu.platform import PLATFORM_NAME, PlatformCPU

    for key, value in settings.CPU_MODE_VARIABLES.items():
        if key not in os.environ:
            undo.setenv(key, value)
    if target.PlatformRegistry.get(PLATFORM_NAME) is not PlatformCPU:
        target.PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)
        undo.call(lambda: target.PlatformRegistry._platforms.pop(PLATFORM_NAME, None))


def register_worker_rollout(target: ModuleType, undo: Undo) -> None:
    if ROLLOUT_KEY not in target._ROLLOUT_REGISTRY:
        undo.setitem(target._ROLLOUT_REGISTRY, ROLLOUT_KEY, _ADAPTER)


def _load_replica() -> type:
    from verl_split.runtime.cpu.rollout import CPURolloutReplica

    return CPURolloutReplica


def register_replica_rollout(target: ModuleType, undo: Undo) -> None:
    registry = target.RolloutReplicaRegistry
    registry.register(ROLLOUT_KEY[0], _load_replica)

    def unregister() -> None:
        if registry._registry.get(ROLLOUT_KEY[0]) is _load_replica:
            del registry._registry[ROLLOUT_KEY[0]]

    undo.call(unregister)


def _plain(value: Any) -> Any:
    """A numpy scalar or a one-element tensor as a Python number; anything else as it is."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (ValueError, RuntimeError):  # more than one element: left to verl's logger, as stock
            return value
    return value


def wrap_file_logger_log(wrapped, instance, args, kwargs):
    data = get_argument(args, kwargs, 0, "data", None)
    if not isinstance(data, dict):
        return wrapped(*args, **kwargs)
    return wrapped({key: _plain(value) for key, value in data.items()}, get_argument(args, kwargs, 1, "step", None))


def wrap_replay_buffer_init(wrapped, instance, args, kwargs):
    wrapped(*args, **kwargs)
    instance.poll_interval = min(float(instance.poll_interval), CPU_POLL_S)
