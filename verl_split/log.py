"""The ``verl_split`` logger: INFO lines users can see in a verl run.

verl sets the root logger to WARNING (``verl/__init__.py``), which would hide the log
lines the split-placement recipe promises (``Creating resource pool: ...``, ``Actor
update completed in 5.2s``), so the ``verl_split`` logger gets its own handler. Inside
Ray actors, stderr is forwarded to the driver's console.
"""

from __future__ import annotations

import logging
import sys

_HANDLER_NAME = "verl_split_console"


def configure(level: int = logging.INFO) -> logging.Logger:
    """Give the ``verl_split`` logger one console handler; calling it again changes nothing."""
    logger = logging.getLogger("verl_split")
    if not any(getattr(h, "name", None) == _HANDLER_NAME for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.name = _HANDLER_NAME
        handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level)
    return logger
