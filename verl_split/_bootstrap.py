"""The verl plugin entry point: verl imports this module in every process of a run.

verl (0.9+) loads the ``verl.plugins`` entry points while ``import verl`` runs, in the
launching process, the TaskRunner actor and every worker actor alike. With
``VERL_SPLIT`` and ``VERL_SPLIT_CPU`` unset this module reads the environment and
returns: standard library only, nothing patched, nothing else imported. With one
set it switches verl-split on through ``seam_catalogue.activate``. Settings
are read once here and frozen for the run (``settings.current()``).
"""

from __future__ import annotations

import sys

from verl_split.core import settings
from verl_split.core.errors import VerlSplitError, activation_failed


def _importer() -> str:
    """Who runs this import: ``"verl"`` (its plugin loader), ``"startup"`` (``_startup``) or ``"other"``."""
    frame = sys._getframe(1)
    while frame is not None:
        # verl's entry-point loop and VERL_USE_EXTERNAL_MODULES run inside verl/__init__.py; the
        # start-up hook imports this module after verl/__init__.py has returned.
        name = frame.f_globals.get("__name__")
        if name == "verl":
            return "verl"
        if name == "verl_split._startup":
            return "startup"
        frame = frame.f_back
    return "other"


#: How this process loaded verl-split (``patches.loaded_by`` words it for ``verl-split doctor``).
IMPORTED_BY = _importer()


def activate_from_environment() -> bool:
    """Switch on what the environment asks for; True if anything was switched on."""
    try:
        wanted = settings.read()
    except VerlSplitError as exc:
        raise activation_failed(str(exc)) from exc
    if not wanted.any_active:
        return False
    # wrapt and every seam table: only in runs that asked for us.
    from verl_split import seam_catalogue

    try:
        seam_catalogue.activate(split=wanted.enabled, cpu=wanted.cpu, frozen=wanted)
    except VerlSplitError as exc:
        raise activation_failed(str(exc)) from exc
    return True


activate_from_environment()
