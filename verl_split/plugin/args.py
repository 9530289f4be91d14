"""Fetch one argument of a wrapped call from ``args`` / ``kwargs``, by position or by name.

A wrapt wrapper sees the call as written: the same parameter may come positionally or as a
keyword. dd-trace-py has the same helper (``get_argument_value``); this one is stdlib-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_MISSING: Any = object()


def get_argument(
    args: Sequence[Any], kwargs: Mapping[str, Any], position: int, name: str, default: Any = _MISSING
) -> Any:
    """The argument ``name`` at ``position`` (0-based, in ``args``) or in ``kwargs``.

    Raise ``TypeError`` naming the parameter when it is in neither and no ``default`` is given.
    """
    if name in kwargs:
        return kwargs[name]
    if 0 <= position < len(args):
        return args[position]
    if default is not _MISSING:
        return default
    raise TypeError(
        f"missing argument {name!r} (position {position}): the call has {len(args)} positional argument(s) "
        f"and keywords {sorted(kwargs)}"
    )
