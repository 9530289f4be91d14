"""Shared-memory segments a run leaves in ``/dev/shm``: found and removed once the run's processes are gone.

A run killed on a timeout, a failed run, and even a run of the real vLLM that ends well, leave segments behind:
vLLM's engine-to-worker message queues (Python ``SharedMemory``, ``psm_*``), which its processes unlink only on a
clean shutdown that Ray's teardown does not give them, and verl's weight buckets (``verl_weights_*``: up to 2 GiB)
when a weight sync failed half-way. Nothing else frees them until the machine restarts.

The runner takes a :func:`snapshot` before it starts a run and calls :func:`remove_left` after the run's whole
process group has ended: a segment that appeared meanwhile, has a name of the kinds above, belongs to this user
and is mapped by no live process is the run's, and is removed. A segment another live run uses is mapped by one
of its processes, and is kept.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SHM_DIR = Path("/dev/shm")
#: The names of the segments a run of verl (and vLLM, Ray's workers) leaves: Python's ``SharedMemory`` default
#: names, the named semaphores of Python's ``multiprocessing`` (vLLM starts its engine and worker with it), and
#: verl's shared-memory weight buckets (``verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py``).
RUN_SEGMENT_PREFIXES = ("psm_", "verl_weights_", "sem.mp-")


def snapshot(directory: Path | None = None) -> frozenset[str]:
    """The names in ``directory`` (default ``SHM_DIR``) now (empty where there is no such folder)."""
    directory = directory or SHM_DIR
    try:
        return frozenset(os.listdir(directory))
    except OSError:
        return frozenset()


def mapped_paths(proc: Path = Path("/proc")) -> set[str]:
    """Every file path some process this user may read maps into its memory (``/proc/PID/maps``)."""
    paths: set[str] = set()
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or another user's
            for line in (entry / "maps").read_text(errors="replace").splitlines():
                fields = line.split(maxsplit=5)
                if len(fields) == 6:
                    paths.add(fields[5].removesuffix(" (deleted)"))
    return paths


def left_by_run(before: frozenset[str], directory: Path = SHM_DIR, in_use: set[str] | None = None) -> list[Path]:
    """The segments in ``directory`` that are not in ``before``, have a run's name, are this user's and are mapped
    by no live process (``in_use``: the mapped paths, default :func:`mapped_paths`)."""
    directory = directory or SHM_DIR
    new = sorted(name for name in snapshot(directory) - before if name.startswith(RUN_SEGMENT_PREFIXES))
    if not new:
        return []
    in_use = mapped_paths() if in_use is None else in_use
    left = []
    for name in new:
        path = directory / name
        with contextlib.suppress(OSError):
            if path.stat().st_uid == os.getuid() and str(path) not in in_use:
                left.append(path)
    return left


def remove_left(before: frozenset[str], directory: Path | None = None) -> list[str]:
    """Remove what :func:`left_by_run` finds; the names removed."""
    removed = []
    for path in left_by_run(before, directory):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed
