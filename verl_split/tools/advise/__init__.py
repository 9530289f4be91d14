"""``verl-split advise``: predict a PPO step's time under each placement from a job's own runs.

``logs`` reads a run's log in any format (``console``: verl's console output, ``exports``: JSONL and CSV) and makes
its steps uniform; ``runs`` reads them into lanes (one pool's work in one phase), with the job's config as the log
gives it (``log_job``) and the run's layout (``layout``); ``requirements`` holds the planner's rules for the job,
``pool_memory`` the memory rule; ``model`` states and fits the cost model (``generation``: the generation lane by KV
room and TP; ``variants``: the ``+shared``, ``+defer`` and ``+shared+defer`` rows' terms); ``candidates`` ranks the
planner's placements, ``stock_fit`` says whether stock fits the cluster with the job's batch and what would,
``run_checks`` whether the runs are of one job and where their GPUs came from, ``reasons`` says why the first
and which of the variants, ``advice`` ties them together, ``render`` prints and plots, ``summary`` gives the three
lines the report ends on, ``profile`` runs the job for ``--profile``, ``cli`` is the subcommand.
"""

from verl_split.tools.advise.advice import Advice, advise
from verl_split.tools.advise.runs import AdviseError

__all__ = ["Advice", "AdviseError", "advise"]
