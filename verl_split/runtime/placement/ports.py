"""Each worker group's rendezvous port, from a range no outgoing connection takes and distinct per group.

verl picks a worker group's ``MASTER_PORT`` (``verl/single_controller/ray/base.py``: ``get_master_addr_port``,
run on the group's first bundle) by binding port 0, closing it and handing the number on; the group's rank 0
binds it seconds later (torch's ``TCPStore``). Port 0 draws from the kernel's ephemeral range, where every
outgoing connection of the node also draws its local port, and under split placement two worker groups and
the rollout servers start at once: a port picked free can be taken before rank 0 binds it (``EADDRINUSE``).

So each group gets verl's own ``master_port_range`` (verl >= 0.7.1): a range below the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), from ``FIRST_PORT`` up, above Ray's worker ports (10002-19999
by default), where only a process that asks for a port by number lands. Within that range verl takes the first
port it can bind; this process hands out the range from just past the last group's port, so two groups
started before either binds never get the same port, and each process starts at an offset of its own (from
its process id), so two runs on one node rarely try the same port first. A range a caller passed itself, or a
group given its own ``master_addr``/``master_port``, is left as it is. Where the ephemeral range leaves no
room (below it, or above it up to 65535), or on verl 0.7.0 (no ``master_port_range``), verl's own pick stays,
with one log line.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from verl_split.plugin.args import get_argument
from verl_split.plugin.seam import Undo

logger = logging.getLogger("verl_split")

#: Ray's worker processes bind ports 10002-19999 unless ``ray start --max-worker-port`` says otherwise.
FIRST_PORT = 20000
LAST_PORT = 65535
#: The least room worth a range of its own: two runs on one node start far apart in it.
MIN_SPAN = 1024
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: verl's ``RayWorkerGroup._get_master_addr_port(self, pg, bundle_index=0, master_port_range=None)``.
RANGE_POSITION = 2


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's range of local ports for outgoing connections (both ends included); None where unreadable."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def rendezvous_range(ephemeral: tuple[int, int] | None) -> tuple[int, int] | None:
    """Ports [start, end) outside ``ephemeral``: below it from ``FIRST_PORT``, else above it; None: no room."""
    if ephemeral is None:
        return None
    low, high = ephemeral
    if low - FIRST_PORT >= MIN_SPAN:
        return FIRST_PORT, low
    start = max(high + 1, FIRST_PORT)
    if LAST_PORT + 1 - start >= MIN_SPAN:
        return start, LAST_PORT + 1
    return None


@dataclass
class PortCursor:
    """Where the next group's search starts in [start, end): just past the last port handed out."""

    start: int
    end: int
    next_port: int

    @classmethod
    def for_process(cls, span: tuple[int, int], pid: int) -> PortCursor:
        start, end = span
        # A prime stride spreads consecutive process ids over the range.
        return cls(start, end, start + (pid * 7919) % (end - start - MIN_SPAN // 2))

    def search_range(self) -> list[int]:
        """verl's ``master_port_range``: [first, last) to try in order."""
        if self.end - self.next_port < MIN_SPAN // 8:  # too little left to search: wrap to the start
            self.next_port = self.start
        return [self.next_port, self.end]

    def handed_out(self, port: int) -> None:
        if self.start <= port < self.end:
            self.next_port = port + 1


_lock = threading.Lock()
_cursor: PortCursor | None = None


def cursor() -> PortCursor | None:
    """This process's cursor, made on first use (None: no room outside the ephemeral range)."""
    global _cursor
    if _cursor is None:
        span = rendezvous_range(ephemeral_range())
        if span is None:
            logger.info(
                "verl-split: the ephemeral port range %s leaves no %d ports outside it: worker groups keep verl's "
                "own rendezvous port",
                ephemeral_range(),
                MIN_SPAN,
            )
            return None
        _cursor = PortCursor.for_process(span, os.getpid())
    return _cursor


def wrap_get_master_addr_port(wrapped, instance, args, kwargs):
    """``RayWorkerGroup._get_master_addr_port``: a search range of this process's own unless the caller chose."""
    chosen = get_argument(args, kwargs, RANGE_POSITION, "master_port_range", None)
    if chosen is not None or instance._master_port is not None or instance._master_addr is not None:
        return wrapped(*args, **kwargs)
    with _lock:  # one search at a time, so that the next one starts past this one's port
        ports = cursor()
        if ports is None:
            return wrapped(*args, **kwargs)
        search = ports.search_range()
        if len(args) > RANGE_POSITION:
            args = (*args[:RANGE_POSITION], search, *args[RANGE_POSITION + 1 :])
        else:
            kwargs = {**kwargs, "master_port_range": search}
        result = wrapped(*args, **kwargs)
        port = int(instance._master_port)
        ports.handed_out(port)
    from verl_split.runtime.placement.nodes import announce

    announce(
        f"worker group {getattr(instance, 'name_prefix', '?')}: rendezvous port {port}, searched from {search[0]} "
        f"(ports {ports.start}-{ports.end - 1}, outside the ephemeral range)"
    )
    return result


def install(target: ModuleType, undo: Undo) -> None:
    """The seam's ``apply``: wrap where this verl takes a range, else step aside saying so (verl 0.7.0)."""
    method = target.RayWorkerGroup._get_master_addr_port
    if "master_port_range" not in inspect.signature(method).parameters:
        logger.info(
            "verl-split: this verl's worker groups take no master_port_range (verl 0.7.1 added it): each keeps "
            "verl's own rendezvous port, drawn from the ephemeral range"
        )
        return
    undo.wrap(target.RayWorkerGroup, "_get_master_addr_port", wrap_get_master_addr_port)
