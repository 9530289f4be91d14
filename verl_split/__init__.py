"""verl-split: split placement and concurrent actor/critic updates for verl.

This module, ``_bootstrap`` and ``_startup`` stay standard-library only: verl imports
``verl_split._bootstrap`` in every process through its ``verl.plugins`` entry
point, and a run without ``VERL_SPLIT`` must pay nothing for that. ``seam_catalogue``
(wrapt and every seam table) is imported only once a ``VERL_SPLIT*`` switch is on.
"""

__version__ = "0.1.0"
