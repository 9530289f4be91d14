"""Wrap and unwrap attributes with wrapt, at most once each.

Every patch in ``verl_split.seams`` goes through these two functions, so the sentinel
that makes a second activation a no-op and the ``__wrapped__`` restore live in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wrapt

# wrapt proxies keep attributes prefixed with ``_self_`` on the proxy itself.
_SENTINEL = "_self_verl_split"


def is_wrapped(owner: Any, attr: str) -> bool:
    """True when ``owner.attr`` (looked up in ``owner.__dict__`` only) is a verl-split wrapper."""
    current = vars(owner).get(attr)
    # wrapt 2 split ObjectProxy from BaseObjectProxy: FunctionWrapper is only the latter.
    return isinstance(current, wrapt.FunctionWrapper) and getattr(current, _SENTINEL, False) is True


def wrap(owner: Any, attr: str, wrapper: Callable[..., Any]) -> bool:
    """Replace ``owner.attr`` with ``wrapper(wrapped, instance, args, kwargs)``; False if already wrapped.

    The attribute must be defined on ``owner`` itself (a class or a module), never
    inherited: wrapping an inherited attribute would shadow it for one subclass only.
    """
    if attr not in vars(owner):
        raise AttributeError(f"{getattr(owner, '__qualname__', owner)!r} defines no attribute {attr!r} to wrap")
    if is_wrapped(owner, attr):
        return False
    proxy = wrapt.FunctionWrapper(vars(owner)[attr], wrapper)
    setattr(proxy, _SENTINEL, True)
    setattr(owner, attr, proxy)
    return True


def unwrap(owner: Any, attr: str) -> bool:
    """Restore what :func:`wrap` replaced; False if ``owner.attr`` is not our wrapper."""
    if not is_wrapped(owner, attr):
        return False
    setattr(owner, attr, vars(owner)[attr].__wrapped__)
    return True
