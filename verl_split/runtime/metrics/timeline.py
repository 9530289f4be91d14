"""A Chrome-trace timeline of the updates and the preparation, one lane per resource pool.

Open the file in ``chrome://tracing`` or https://ui.perfetto.dev. Written by the trainer
process when ``VERL_SPLIT_TRACE`` names a file. Each flush appends the new events in place of
the closing ``]}`` and writes it again, so the file is valid JSON after every step and a flush
costs the new events, not the whole run (a rewrite per step grows quadratically). A crash in the
middle of a flush leaves an array without its ``]``, which Chrome's trace format tolerates.

Timestamps are the callers' ``time.monotonic()`` seconds, written in microseconds: the clock
``benchmarks/breakdown.py`` and ``tests/support/plugins/phase_log.py`` line the lanes up against.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field

_HEAD = '{"displayTimeUnit": "ms", "traceEvents": [\n'
_TAIL = "\n]}\n"


@dataclass
class Timeline:
    path: str
    lanes: dict[str, int] = field(default_factory=dict)
    #: Events added since the last flush.
    pending: list[dict] = field(default_factory=list)
    #: Whether this timeline has written its file (the first flush truncates what a previous run left).
    started: bool = False
    #: Events in the file.
    written: int = 0
    # Callers record from the trainer's thread today; the lock keeps add/flush safe from any other.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, lane: str, start_s: float, end_s: float, **args: object) -> None:
        """Add one interval; times are ``time.monotonic()`` seconds."""
        with self.lock:
            if lane not in self.lanes:
                self.lanes[lane] = len(self.lanes) + 1
                self.pending.append(
                    {"ph": "M", "name": "process_name", "pid": self.lanes[lane], "tid": 0, "args": {"name": lane}}
                )
            self.pending.append(
                {
                    "ph": "X",
                    "name": name,
                    "pid": self.lanes[lane],
                    "tid": 0,
                    "ts": start_s * 1e6,
                    "dur": max(end_s - start_s, 0.0) * 1e6,
                    "args": args,
                }
            )

    def flush(self) -> None:
        """Append the pending events to the file, which stays valid JSON."""
        with self.lock:
            if self.started and not self.pending:
                return
            body = ",\n".join(json.dumps(event) for event in self.pending)
            if self.started and os.path.exists(self.path):
                with open(self.path, "r+b") as f:
                    f.seek(-len(_TAIL), os.SEEK_END)
                    f.write(((",\n" if self.written else "") + body + _TAIL).encode())
                    f.truncate()
            else:
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
                with open(self.path, "w") as f:
                    f.write(_HEAD + body + _TAIL)
                self.started = True
            self.written += len(self.pending)
            self.pending.clear()
