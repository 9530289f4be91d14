"""Register the CPU rollout (``rollout.name=cpu_hf``) in verl's two rollout registries.

Targets: ``verl/workers/rollout/base.py`` ``_ROLLOUT_REGISTRY`` (the worker-side class
the hybrid actor worker builds, looked up by ``(name, mode)``) and
``verl/workers/rollout/replica.py`` ``RolloutReplicaRegistry`` (the trainer-side
replica that launches the generation servers). verl has no CPU rollout of its own;
these registries are the seams it offers for one, so entries are added, not wrapped.
Each registry is patched by its own seam so either module may be imported first.
"""

from __future__ import annotations

from types import ModuleType

_KEY = ("cpu_hf", "async")  # (rollout.name, rollout.mode); mirrors verl_split.cpu.rollout.ROLLOUT_NAME


def _load_replica() -> type:
    from verl_split.cpu.rollout import CPURolloutReplica

    return CPURolloutReplica


def patch_worker_registry(module: ModuleType) -> None:
    module._ROLLOUT_REGISTRY.setdefault(_KEY, "verl_split.cpu.rollout.CPURolloutAdapter")


def unpatch_worker_registry(module: ModuleType) -> None:
    if module._ROLLOUT_REGISTRY.get(_KEY) == "verl_split.cpu.rollout.CPURolloutAdapter":
        del module._ROLLOUT_REGISTRY[_KEY]


def patch_replica_registry(module: ModuleType) -> None:
    module.RolloutReplicaRegistry.register(_KEY[0], _load_replica)


def unpatch_replica_registry(module: ModuleType) -> None:
    if module.RolloutReplicaRegistry._registry.get(_KEY[0]) is _load_replica:
        del module.RolloutReplicaRegistry._registry[_KEY[0]]
