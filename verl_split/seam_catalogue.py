"""Every seam verl-split patches, handed to the registry from above.

The features under ``verl_split/runtime/`` declare their seams in their ``seams.py``; the registry that
switches seams on (``plugin/activation``) sits below the features, which import ``plugin``, so it must not
import their tables (issue 28). This module sits above both: it collects the six tables into ``SEAMS`` and
installs them into the registry. Whatever switches verl-split on goes through :func:`activate` here (the
bootstrap, ``verl-split doctor``, tests); code that runs after that (a hook's ``activation.require``) finds
the catalogue installed already.

Imports wrapt and every seam table: only the bootstrap's function body imports it, once a ``VERL_SPLIT*``
switch is on.
"""

from __future__ import annotations

from verl_split.core import settings
from verl_split.plugin import activation
from verl_split.plugin.seam import Seam
from verl_split.runtime.attention.seams import SEAMS as ATTENTION
from verl_split.runtime.cpu.seams import SEAMS as CPU
from verl_split.runtime.metrics.seams import SEAMS as METRICS
from verl_split.runtime.overlap.seams import SEAMS as OVERLAP
from verl_split.runtime.placement.seams import SEAMS as PLACEMENT
from verl_split.runtime.shared_rollout.seams import SEAMS as SHARED_ROLLOUT

#: Every seam verl-split patches, per feature and verl release family.
SEAMS: tuple[Seam, ...] = (*PLACEMENT, *OVERLAP, *METRICS, *SHARED_ROLLOUT, *ATTENTION, *CPU)


def install() -> None:
    """Make ``SEAMS`` the registry's catalogue; a second call changes nothing."""
    activation.install(SEAMS)


def activate(split: bool = True, cpu: bool = False, frozen: settings.Settings | None = None) -> list[str]:
    """Install ``SEAMS``, then register the seams for the installed verl (``activation.activate``)."""
    install()
    # Looked up at call time: tests/support/pyrun.py's COUNT_ACTIVATIONS counts calls by replacing activation.activate.
    return activation.activate(split=split, cpu=cpu, frozen=frozen)
