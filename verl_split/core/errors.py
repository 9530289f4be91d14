"""Exceptions verl-split raises on purpose. Standard library only."""

import logging


class VerlSplitError(Exception):
    """A problem the user can fix: the message says what is wrong and how to fix it."""


class SettingsError(VerlSplitError):
    """A ``VERL_SPLIT*`` environment variable has a value verl-split does not accept."""


class PlacementError(VerlSplitError):
    """A placement that cannot be planned on the given cluster."""


class UnsupportedVerlError(VerlSplitError):
    """The installed verl release is outside the range verl-split supports."""


class UpdateFailedError(VerlSplitError):
    """The actor or the critic update failed while both were running."""


class PrepFailedError(VerlSplitError):
    """old_log_prob/ref (actor) or values (critic) failed while the other pool's lane was running."""


class ActivationFailed(SystemExit):
    """Stop the process: the user asked for verl-split and it cannot be switched on.

    A ``SystemExit`` on purpose: verl loads ``verl.plugins`` entry points inside
    ``except Exception`` and logs failures only at DEBUG (``verl/__init__.py``), and
    wrapt drops a post-import hook that raised, so the next import would run stock.
    Either way a plain exception would turn into a silent stock run.
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"verl-split: {message}")


def activation_failed(message: str, unexpected: bool = False) -> ActivationFailed:
    """Log why activation stops this process, then return the exception to raise.

    Python prints only a ``SystemExit``'s message, and inside a Ray actor Ray turns it into
    an actor death whose detail carries the message but no traceback. The log line goes to
    the process's stderr, which Ray forwards to the driver's console; an unexpected failure
    (``unexpected=True``, called inside ``except``) logs its traceback there too.
    """
    from verl_split.core import log  # standard library only

    log.configure()
    logging.getLogger("verl_split").error("verl-split: %s", message, exc_info=unexpected)
    return ActivationFailed(message)
