"""The ``verl_split`` logger: INFO lines users can see in a verl run, without taking over logging.

verl sets the root logger to WARNING (``verl/__init__.py``), which would hide the log
lines the split-placement recipe promises (``Creating resource pool: ...``, ``Actor
update completed in 5.2s``). So the ``verl_split`` logger gets INFO unless the
application chose a level for it, and a console handler of its own that writes a record only
when no handler of the root logger would show it (there is none, or only ones above the
record's level: importing vLLM, which a run does long after this, raises the root logger's
handler to ERROR); its records still propagate, so the application's handlers (OpenTelemetry, pytest's
``caplog``) see them. Inside Ray actors, stderr is forwarded to the driver's console.
"""

from __future__ import annotations

import logging
import sys

_HANDLER_NAME = "verl_split_console"


def configure(level: int = logging.INFO) -> logging.Logger:
    """Make the ``verl_split`` logger's INFO lines visible; calling it again changes nothing."""
    logger = logging.getLogger("verl_split")
    if logger.level == logging.NOTSET:  # a level the application set wins
        logger.setLevel(level)
    has_ours = any(getattr(h, "name", None) == _HANDLER_NAME for h in logger.handlers)
    if not has_ours:
        handler = _UnlessTheRootShowsIt(sys.stderr)
        handler.name = _HANDLER_NAME
        handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
        logger.addHandler(handler)
    return logger


class _UnlessTheRootShowsIt(logging.StreamHandler):
    """Writes a record only where no handler of the root logger would (asked at each record: the root's handlers
    change during a run), so that a line is shown once, by the application's handlers where they show it."""

    def emit(self, record: logging.LogRecord) -> None:
        if any(record.levelno >= handler.level for handler in logging.getLogger().handlers):
            return
        super().emit(record)


_said: set[str] = set()


def once(logger: logging.Logger, message: str, level: int = logging.INFO) -> None:
    """Log ``message`` the first time it comes up in this process (a reason that holds for every step)."""
    if message not in _said:
        _said.add(message)
        logger.log(level, message)


def forget_once() -> None:
    """Let every message of :func:`once` be logged again (tests)."""
    _said.clear()
