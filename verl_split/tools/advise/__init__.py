"""``verl-split advise``: predict a PPO step's time under each placement from a job's own runs.

``runs`` reads verl's per-step metrics into lanes (one pool's work in one phase; ``steps``: one step's),
``model`` states and fits the cost model (``deferral``, ``shared`` and ``late_join``: the deferred critic
update's, shared rollout's and both together's terms), ``candidates`` ranks the planner's placements,
``reasons`` says why the first, ``defer_or_share`` picks the deferral, shared rollout or both, ``advice`` ties
them together, ``render`` prints and plots, ``cli`` is the subcommand.
"""

from verl_split.tools.advise.advice import Advice, advise
from verl_split.tools.advise.runs import AdviseError

__all__ = ["Advice", "AdviseError", "advise"]
