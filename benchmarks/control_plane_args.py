"""The arguments both control-plane benchmarks take (``control_plane.py``, ``control_plane_tail.py``).

One place for them, so that the two harnesses keep sweeping the same request counts and the same server size
unless a run says otherwise on the command line.
"""

from __future__ import annotations

import argparse


def control_plane_parser(doc: str, repeats: int) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first line, with the request counts, the repeats (``repeats`` by default: a
    harness's run time sets it) and a server's slots."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[1024, 4096, 16384], help="the step sizes")
    parser.add_argument("--repeats", type=int, default=repeats, help="repetitions of every arm at every size")
    parser.add_argument("--max-num-seqs", type=int, default=256, help="requests a server runs at once (vLLM's)")
    return parser
