"""What each pytest-xdist worker runs together, and apart (``-n 2 --dist loadgroup``: ``make test``'s unit,
subprocess and network tiers; any tier when run so by hand).

``make test`` runs the end-to-end runs one at a time: two at once were slower (31.0 min against 25.3) and a
shared-rollout run's late join then did not pay; the subprocess and network tiers gained (14.1 min against 16.8).
Run so, what must hold:

- A file's tests stay on one worker, so that its module-scoped runs are made once; the files sharing a
  session-scoped run (``tests/conftest.py``) stay together too. Unit tests get no group:
  xdist spreads them one by one.
- Each worker's Ray lives in a folder of its own (``RAY_TMPDIR``, set by ``tests/conftest.py``; the dry run's
  folder follows it, ``verl_split.dryrun.recipe.ray_temp_dir``): a ``ray start`` or ``ray.cluster_utils.Cluster``
  head writes its address in Ray's folder, and a plain ``ray.init()`` elsewhere would join that cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Files whose tests share session-scoped runs (tests/conftest.py: the split-halves, shared-rollout and example runs).
SHARED_RUN_FILES = frozenset(
    {
        "test_split_placement_e2e.py",
        "test_shared_rollout_e2e.py",
        "test_shared_rollout_v0_e2e.py",
        "test_checkpoint_e2e.py",
        "test_examples_e2e.py",
    }
)


def group_of(path: Path, markers: set[str]) -> str | None:
    """The xdist group of a test in the file at ``path`` carrying ``markers`` (their names); None: no group."""
    if "unit" in markers:
        return None
    return "shared_run" if path.name in SHARED_RUN_FILES else path.as_posix()


def ray_folder(worker: str | None) -> str | None:
    """``RAY_TMPDIR`` for an xdist worker (``PYTEST_XDIST_WORKER``: gw0, gw1, ...); None outside xdist.

    Under the ``RAY_TMPDIR`` the session was started with, if any (else ``/tmp``): two checkouts testing at once on
    one machine each give their own, so that their workers' clusters never meet. Keep it short (Ray's socket paths).
    """
    return os.path.join(os.environ.get("RAY_TMPDIR") or "/tmp", f"ray_{worker}") if worker else None
