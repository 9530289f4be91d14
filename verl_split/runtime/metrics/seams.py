"""The whole-step metrics' seam: ``Tracking.log`` (``tracking.py``), on every verl release."""

from __future__ import annotations

from verl_split.core import compat
from verl_split.plugin.seam import Seam, Wrap

SEAMS: tuple[Seam, ...] = (
    Seam(
        "step_metrics",
        "verl.utils.tracking",
        "split",
        "placement",
        compat.ANY,
        needs=("Tracking.log(data@0, step@1)",),
        wraps=(Wrap("Tracking.log", "verl_split.runtime.metrics.tracking:wrap_tracking_log"),),
    ),
)
