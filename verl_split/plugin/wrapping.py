"""Wrap and unwrap attributes with wrapt, at most once each.

Every wrapper a seam puts on verl (``plugin/seam.py``) goes through these two functions, so the check that
makes a second activation a no-op and the ``__wrapped__`` restore live in one place.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import wrapt

#: The attribute every verl-split layer carries, wrapt's wrappers and the plain functions of ``apply`` seams alike.
MARK = "_self_verl_split"


class VerlSplitWrapper(wrapt.FunctionWrapper):
    """A wrapt function wrapper that marks verl-split's patches and pickles by reference.

    Ray pickles some functions by value (those of ``__main__`` and of ``@ray.remote``
    classes, e.g. verl's ``TaskRunner.run``); their globals may name a function we
    wrapped, and a wrapt proxy cannot be pickled. Pickled by its module and name, the
    receiving process finds the attribute there, patched or not as that process is.
    """

    _self_verl_split = True  # MARK; wrapt keeps ``_self_`` attributes on the proxy, not the wrapped function

    def __reduce_ex__(self, protocol: int) -> tuple[Callable[..., Any], tuple[str, str]]:
        return _import_by_name, (self.__wrapped__.__module__, self.__wrapped__.__qualname__)


def _import_by_name(module: str, qualname: str) -> Any:
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def is_wrapped(owner: Any, attr: str) -> bool:
    """True when ``owner.attr`` (looked up in ``owner.__dict__`` only) is a verl-split wrapper."""
    return isinstance(vars(owner).get(attr), VerlSplitWrapper)


def wrap(owner: Any, attr: str, wrapper: Callable[..., Any]) -> bool:
    """Replace ``owner.attr`` with ``wrapper(wrapped, instance, args, kwargs)``; False if already wrapped.

    The attribute must be defined on ``owner`` itself (a class or a module), never
    inherited: wrapping an inherited attribute would shadow it for one subclass only.
    """
    if attr not in vars(owner):
        raise AttributeError(f"{getattr(owner, '__qualname__', owner)!r} defines no attribute {attr!r} to wrap")
    if is_wrapped(owner, attr):
        return False
    setattr(owner, attr, VerlSplitWrapper(vars(owner)[attr], wrapper))
    return True


def unwrap(owner: Any, attr: str) -> bool:
    """Restore what :func:`wrap` replaced; False if ``owner.attr`` is not our wrapper."""
    if not is_wrapped(owner, attr):
        return False
    setattr(owner, attr, vars(owner)[attr].__wrapped__)
    return True


def layers(obj: Any) -> int:
    """How many verl-split layers wrap ``obj`` (a second activation must add none)."""
    count = 0
    while getattr(obj, MARK, False):
        count, obj = count + 1, obj.__wrapped__
    return count
