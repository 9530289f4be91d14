"""``verl-split advise``: predict a PPO step's time under each placement from a job's own runs.

``runs`` reads verl's per-step metrics into lanes (one pool's work in one phase), ``model`` states and fits
the cost model (``deferral`` and ``shared``: the deferred critic update's and shared rollout's terms),
``candidates`` ranks the planner's placements, ``defer_or_share`` picks one of those two features, ``advice``
ties them together, ``render`` prints and plots, ``cli`` is the subcommand.
"""

from verl_split.tools.advise.advice import Advice, advise
from verl_split.tools.advise.runs import AdviseError

__all__ = ["Advice", "AdviseError", "advise"]
