"""Let verl 0.7's legacy critic update be dispatched without blocking; see :mod:`verl_split.legacy`.

Target: ``verl/workers/fsdp_workers.py`` ``CriticWorker.update_critic`` (``@register(...,
blocking=True)`` by default). The class attribute is replaced by a plain function that calls
verl's and carries a copy of its ``register`` attributes with ``blocking=DEFERRED``; verl's
function and its attribute dict stay untouched, so ``unpatch`` puts the very object back.
"""

from __future__ import annotations

import functools
from types import ModuleType

_ATTR = "update_critic"
#: The marker every verl-split layer carries (wrapt wrappers too, see _wrapping.VerlSplitWrapper).
_MARK = "_self_verl_split"


def _deferred_copy(original):
    from verl.single_controller.base.decorator import MAGIC_ATTR

    from verl_split.legacy import DEFERRED

    @functools.wraps(original)
    def update_critic(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    # functools.wraps copied verl's attribute dict by reference: give this function its own.
    setattr(update_critic, MAGIC_ATTR, {**getattr(original, MAGIC_ATTR), "blocking": DEFERRED})
    setattr(update_critic, _MARK, True)
    return update_critic


def patch(module: ModuleType) -> None:
    current = vars(module.CriticWorker)[_ATTR]
    if getattr(current, _MARK, False):
        return
    setattr(module.CriticWorker, _ATTR, _deferred_copy(current))


def unpatch(module: ModuleType) -> None:
    current = vars(module.CriticWorker)[_ATTR]
    if getattr(current, _MARK, False):
        setattr(module.CriticWorker, _ATTR, current.__wrapped__)
