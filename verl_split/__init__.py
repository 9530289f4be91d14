"""verl-split: split placement and concurrent actor/critic updates for verl.

This package's top level stays standard-library only: verl imports
``verl_split._bootstrap`` in every process through its ``verl.plugins`` entry
point, and a run without ``VERL_SPLIT`` must pay nothing for that.
"""

__version__ = "0.1.0"
