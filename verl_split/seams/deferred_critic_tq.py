"""Keep what a deferred critic update reads alive (``verl_split/deferred_critic.py``).

Target: ``transfer_queue`` ``kv_clear(keys, partition_id)``, which verl's v1 ``PPOTrainer.fit``
calls at the end of each step on the step's keys (``verl/trainer/ppo/v1/trainer_base.py``,
"cleanup transfer queue"). The critic's workers read those keys inside their update; while that
update runs on, a clear of any of its keys is postponed to its join. Every other call passes.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, deferred_critic
from verl_split._args import get_argument


def _wrap_kv_clear(wrapped, instance, args, kwargs):
    keys = get_argument(args, kwargs, 0, "keys", None)
    partition_id = get_argument(args, kwargs, 1, "partition_id", None)
    if keys is not None and deferred_critic.postpone_clear(keys, partition_id, lambda: wrapped(*args, **kwargs)):
        return None
    return wrapped(*args, **kwargs)


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "kv_clear", _wrap_kv_clear)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "kv_clear")
