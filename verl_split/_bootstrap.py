"""The verl plugin entry point: verl imports this module in every process of a run.

verl (0.9+) loads the ``verl.plugins`` entry points while ``import verl`` runs, in the
launching process, the TaskRunner actor and every worker actor alike. With
``VERL_SPLIT`` and ``VERL_SPLIT_CPU`` unset this module reads the environment and
returns: standard library only, nothing patched, nothing else imported. Settings
are read once here and frozen for the run (``settings.current()``).
"""

from __future__ import annotations

from verl_split import settings
from verl_split.errors import VerlSplitError, activation_failed


def activate_from_environment() -> bool:
    """Switch on what the environment asks for; True if anything was switched on."""
    try:
        wanted = settings.read()
    except VerlSplitError as exc:
        raise activation_failed(str(exc)) from exc
    if not wanted.any_active:
        return False
    from verl_split import activation  # imports wrapt: only in runs that asked for us

    try:
        activation.activate(split=wanted.enabled, cpu=wanted.cpu, frozen=wanted)
    except VerlSplitError as exc:
        raise activation_failed(str(exc)) from exc
    return True


activate_from_environment()
