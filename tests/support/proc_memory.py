"""The summed memory of a process and all its descendants, sampled while it runs (Linux ``/proc``).

A verl run is a process tree: the driver, Ray's raylet and GCS, and one process per worker. The tests
report it and ``benchmarks/dry_run_cost.py`` measures it for the CPU dry run; a test helper, so it lives
here and not in the wheel.
"""

from __future__ import annotations

import os
import threading

_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(root: int) -> list[int]:
    """``root`` and every process under it, by walking ``/proc/*/stat``'s parent ids."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in bytes; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * _PAGE
        pss = rss
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
        return rss, pss
    except (OSError, ValueError, IndexError):
        return 0, 0


class TreeMemorySampler(threading.Thread):
    """Sample the summed RSS and PSS of a process and all its descendants until :meth:`stop`.

    RSS counts a shared page once per process that maps it (an upper bound); PSS splits it between them.
    """

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            usage = [memory(p) for p in descendants(self.pid)]
            self.peak_rss = max(self.peak_rss, sum(r for r, _ in usage))
            self.peak_pss = max(self.peak_pss, sum(p for _, p in usage))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()
