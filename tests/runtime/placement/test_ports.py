"""Rendezvous ports outside the ephemeral range: the range, the cursor, and the wrapper against real sockets.

verl's own port search (``get_master_addr_port``'s function, run here in this process rather than as a Ray task)
binds real sockets; a port the seam would pick first is held by a listening socket, as another process's would be.
"""

from __future__ import annotations

import logging
import os
import socket
import types

import pytest

from verl_split.plugin.seam import Undo
from verl_split.runtime.placement import ports

pytestmark = pytest.mark.unit


def test_the_range_lies_below_the_ephemeral_range_from_ray_s_worker_ports_up():
    assert ports.rendezvous_range((32768, 60999)) == (20000, 32768)  # Linux's default


def test_a_low_ephemeral_range_leaves_the_ports_above_it():
    assert ports.rendezvous_range((10000, 40000)) == (40001, 65536)


def test_no_room_outside_the_ephemeral_range_keeps_verl_s_own_pick():
    assert ports.rendezvous_range((1024, 65535)) is None
    assert ports.rendezvous_range(None) is None


def test_the_ephemeral_range_is_read_from_proc(tmp_path):
    (tmp_path / "range").write_text("32768\t60999\n")
    assert ports.ephemeral_range(tmp_path / "range") == (32768, 60999)
    assert ports.ephemeral_range(tmp_path / "missing") is None


def test_two_processes_start_apart_and_a_cursor_near_the_end_wraps():
    a, b = (ports.PortCursor.for_process((20000, 32768), pid) for pid in (4242, 4243))
    assert a.next_port != b.next_port
    assert all(20000 <= c.next_port < 32768 for c in (a, b))
    late = ports.PortCursor(20000, 32768, 32760)
    assert late.search_range() == [20000, 32768]


class Group:
    """What the wrapper reads of verl's ``RayWorkerGroup``, with verl's own port search as the wrapped call."""

    def __init__(self, master_addr=None, master_port=None):
        self._master_addr, self._master_port = master_addr, master_port
        self.ranges = []

    def get_master_addr_port(self, pg=None, bundle_index=0, master_port_range=None):
        from verl.single_controller.ray.base import get_master_addr_port

        self.ranges.append(master_port_range)
        self._master_addr, self._master_port = get_master_addr_port._function(master_port_range=master_port_range)


def start(group: Group, *args, **kwargs) -> int:
    ports.wrap_get_master_addr_port(group.get_master_addr_port, group, args, kwargs)
    return int(group._master_port)


@pytest.fixture
def fresh_cursor(monkeypatch):
    span = ports.rendezvous_range(ports.ephemeral_range())
    if span is None:
        pytest.skip(f"this machine's ephemeral range {ports.ephemeral_range()} leaves no room outside it")
    cursor = ports.PortCursor.for_process(span, os.getpid())
    monkeypatch.setattr(ports, "_cursor", cursor)
    return cursor


def test_a_taken_first_port_is_skipped_and_two_groups_never_share_one(fresh_cursor):
    first = fresh_cursor.next_port
    with socket.socket() as other:  # another process's listener on the first port the seam would pick
        other.bind(("", first))
        other.listen()
        critic, actor = start(Group(), "pg"), start(Group(), "pg", 0)  # neither has bound its port yet
    low, high = ports.ephemeral_range()
    assert first < critic < actor < fresh_cursor.end
    assert not low <= critic <= high and not low <= actor <= high
    for port in (critic, actor):  # each group's rank 0 can bind what it was handed
        with socket.socket() as rank0:
            rank0.bind(("", port))


def test_a_caller_s_own_range_or_port_is_left_alone(fresh_cursor):
    before = fresh_cursor.next_port
    mine = Group()
    start(mine, "pg", 0, [45000, 45100])
    assert mine.ranges == [[45000, 45100]] and 45000 <= int(mine._master_port) < 45100
    given = Group("10.0.0.1", "29500")
    start(given, "pg")
    assert given.ranges == [None]
    assert fresh_cursor.next_port == before


def test_the_seam_steps_aside_where_verl_takes_no_range(caplog):
    from verl_split.plugin import wrapping

    class OldGroup:  # verl 0.7.0
        def _get_master_addr_port(self, pg): ...

    undo = Undo()
    with caplog.at_level(logging.INFO, logger="verl_split"):
        ports.install(types.SimpleNamespace(RayWorkerGroup=OldGroup), undo)
    assert "take no master_port_range" in caplog.text
    assert not wrapping.is_wrapped(OldGroup, "_get_master_addr_port")


def test_the_seam_wraps_where_verl_takes_a_range_and_unwraps():
    from verl_split.plugin import wrapping

    class NewGroup:  # verl >= 0.7.1
        def _get_master_addr_port(self, pg, bundle_index=0, master_port_range=None): ...

    undo = Undo()
    ports.install(types.SimpleNamespace(RayWorkerGroup=NewGroup), undo)
    assert wrapping.is_wrapped(NewGroup, "_get_master_addr_port")
    undo.run()
    assert not wrapping.is_wrapped(NewGroup, "_get_master_addr_port")
