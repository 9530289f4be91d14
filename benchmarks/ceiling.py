"""This machine's parallel ceiling: two bare torch processes doing equal work, at once and one after the other.

Each process is set up as verl's CPU workers are (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``),
imports torch and builds its matrices, says it is ready, waits for the word, then multiplies two
square matrices a fixed number of times and reports when it started and ended (``time.monotonic()``).
The pair is measured twice: started at the same moment, and one after the other. With ideal wall =
the longer of the two single runs and measured wall = first start to last end of the concurrent pair,

    ceiling = ideal wall / measured wall

1.0 means two single-threaded processes do not slow each other at all; it is the best efficiency an
overlap of two equal lanes can reach on this machine, whatever the framework does. Run alone
(``python benchmarks/ceiling.py``) it prints one measurement; ``whole_step.py`` measures it once per
repetition, between the PPO runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

#: Matrix size: a few MB per matrix, so the work runs in the cache hierarchy and in memory, like the
#: workers' small models, rather than in one core's registers.
SIZE = 384


def _work(iterations: int) -> None:
    """The worker process: import torch, get ready, wait for the word on stdin, multiply, report."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.rand(SIZE, SIZE), torch.rand(SIZE, SIZE)
    torch.mm(a, b)  # first call: the allocator and the kernels are warm before the clock runs
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    for _ in range(iterations):
        c = torch.mm(a, b)
        a, c = c / (c.abs().max() + 1.0), a  # keep the values bounded, and every product dependent on the last
    end = time.monotonic()
    print(json.dumps({"start": start, "end": end}), flush=True)


def _spawn(iterations: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", str(iterations)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("a ceiling worker did not start (is torch importable?)")
    return proc


def _run(procs: list[subprocess.Popen]) -> list[tuple[float, float]]:
    for proc in procs:  # as close together as two writes are
        proc.stdin.write("go\n")
        proc.stdin.flush()
    spans = []
    for proc in procs:
        line = proc.stdout.readline()
        proc.wait()
        if proc.returncode != 0 or not line:
            raise RuntimeError(f"a ceiling worker failed (exit status {proc.returncode})")
        record = json.loads(line)
        spans.append((record["start"], record["end"]))
    return spans


@dataclass
class Ceiling:
    iterations: int
    single_s: tuple[float, float]  # each process alone
    concurrent_wall_s: float  # both at once: first start to last end

    @property
    def ideal_wall_s(self) -> float:
        return max(self.single_s)

    @property
    def ceiling(self) -> float:
        return self.ideal_wall_s / self.concurrent_wall_s

    def to_json(self) -> dict:
        return {
            "iterations": self.iterations,
            "single_s": list(self.single_s),
            "ideal_wall_s": self.ideal_wall_s,
            "concurrent_wall_s": self.concurrent_wall_s,
            "ceiling": self.ceiling,
        }


def iterations_for(seconds: float) -> int:
    """How many products one process does in about ``seconds``, measured alone."""
    probe = 20
    (start, end) = _run([_spawn(probe)])[0]
    return max(probe, round(seconds * probe / max(end - start, 1e-6)))


def measure(iterations: int) -> Ceiling:
    """The pair at once (both ready before either starts), then each alone."""
    spans = _run([_spawn(iterations), _spawn(iterations)])
    concurrent = max(end for _, end in spans) - min(start for start, _ in spans)
    singles = []
    for _ in range(2):
        (start, end) = _run([_spawn(iterations)])[0]
        singles.append(end - start)
    return Ceiling(iterations, (singles[0], singles[1]), concurrent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="work per process (default %(default)s s)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        _work(args.worker)
        return 0
    result = measure(iterations_for(args.seconds))
    print(json.dumps(result.to_json(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
