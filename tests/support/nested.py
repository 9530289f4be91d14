"""Build verl-like configs as nested dicts in unit tests."""

from __future__ import annotations

from typing import Any


def set_dotted(config: dict[str, Any], dotted: str, value: Any, sep: str = ".") -> dict[str, Any]:
    """Set ``config[a][b][c] = value`` for ``dotted`` = ``"a.b.c"``, making the levels that are missing."""
    node = config
    *parents, leaf = dotted.split(sep)
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return config
