"""A Chrome-trace timeline of the updates and the preparation, one lane per resource pool.

Open the file in ``chrome://tracing`` or https://ui.perfetto.dev. Written by the
trainer process when ``VERL_SPLIT_TRACE`` names a file; rewritten whole after every
step, so a run that stops early still leaves a valid file.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field


@dataclass
class Timeline:
    path: str
    events: list[dict] = field(default_factory=list)
    lanes: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, lane: str, start_s: float, end_s: float, **args: object) -> None:
        """Add one interval; times are seconds on one clock (verl-split uses ``time.monotonic()``)."""
        with self.lock:
            if lane not in self.lanes:
                self.lanes[lane] = len(self.lanes) + 1
                self.events.append(
                    {"ph": "M", "name": "process_name", "pid": self.lanes[lane], "tid": 0, "args": {"name": lane}}
                )
            self.events.append(
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
        with self.lock:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump({"traceEvents": self.events, "displayTimeUnit": "ms"}, f)
            os.replace(tmp, self.path)
