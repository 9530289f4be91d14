"""Seam for ``verl/workers/rollout/base.py``: see :mod:`verl_split.seams.cpu_rollout`."""

from verl_split.seams.cpu_rollout import patch_worker_registry as patch
from verl_split.seams.cpu_rollout import unpatch_worker_registry as unpatch

__all__ = ["patch", "unpatch"]
