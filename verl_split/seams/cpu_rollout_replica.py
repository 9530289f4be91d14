"""Seam for ``verl/workers/rollout/replica.py``: see :mod:`verl_split.seams.cpu_rollout`."""

from verl_split.seams.cpu_rollout import patch_replica_registry as patch
from verl_split.seams.cpu_rollout import unpatch_replica_registry as unpatch

__all__ = ["patch", "unpatch"]
