"""Which tests one pytest-xdist worker runs together (``make test``: ``-n 2 --dist loadgroup``).

Two at once fill the 2-core machine: a subprocess test is one interpreter importing verl (one core), an end-to-end
run about 1.4 cores (its processes mostly start up). Some tests must not be split or run beside each other:

- a file's tests stay on one worker, so that its module-scoped runs are made once;
- the files sharing a session-scoped run (``halves_split_run`` in ``tests/conftest.py``) stay together too;
- every test that starts a Ray cluster of its own (the ``ray`` marker) runs on one worker, one at a time: a
  ``ray start`` cluster is what a plain ``ray.init()`` elsewhere on the machine would join.

Unit tests get no group: xdist spreads them one by one.
"""

from __future__ import annotations

from pathlib import Path

#: Files whose tests share one session-scoped run.
SHARED_RUN_FILES = frozenset({"test_split_placement_e2e.py", "test_shared_rollout_e2e.py"})


def group_of(path: Path, markers: set[str]) -> str | None:
    """The xdist group of a test in the file at ``path`` carrying ``markers`` (their names); None: no group."""
    if "unit" in markers:
        return None
    if "ray" in markers:
        return "ray"
    return "shared_run" if path.name in SHARED_RUN_FILES else path.as_posix()
