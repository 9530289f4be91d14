"""Exceptions verl-split raises on purpose. Standard library only."""


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
