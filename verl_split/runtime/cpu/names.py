"""The CPU rollout servers' Ray actor names, in one place.

The replica launches its server under this name (``rollout.py``), the worker-side adapter finds it by it to push
weights, and the tests' forced tail (``hold.py``) finds every server of the run by its prefix.
"""

from __future__ import annotations

#: Every CPU rollout server's actor name starts with this (a replica rank, and verl's name suffix, follow).
SERVER_NAME_PREFIX = "verl_split_cpu_rollout_server_"


def server_name(replica_rank: int) -> str:
    """The Ray actor name of a replica's server; the worker-side adapter finds it by this."""
    return f"{SERVER_NAME_PREFIX}{replica_rank}"
