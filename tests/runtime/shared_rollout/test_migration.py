"""Which requests a migration moves and when it refuses (``migration.py``): the choice and the version check alone,
on figures given by hand. The moves themselves run on Ray in ``test_migration_ray.py``."""

from __future__ import annotations

import pytest

from verl_split.runtime.shared_rollout.migration import MigrationRefused, Move, check_versions, choose_moves

pytestmark = pytest.mark.unit


def test_the_busiest_server_gives_its_longest_running_request_first_and_targets_fill_evenly():
    running = {
        "a-old": ("a", 0.0),
        "a-mid": ("a", 5.0),
        "a-new": ("a", 9.0),
        "b-old": ("b", 1.0),
        "b-new": ("b", 8.0),
        "x": ("c", 0.0),  # already on a joiner: never a candidate
    }
    inflight = {"a": 3, "b": 2, "c": 1, "d": 0}
    moves = choose_moves(running, inflight, ["a", "b"], ["c", "d"], count=3)
    # a (3) gives a-old to d (0); then a and b tie at 2 and the lower name goes first: a-mid, to c; then b.
    assert moves == [Move("a-old", "a", "d"), Move("a-mid", "a", "c"), Move("b-old", "b", "d")]


def test_never_more_moves_than_asked_or_than_there_are_requests():
    running = {"a1": ("a", 0.0), "a2": ("a", 1.0)}
    assert len(choose_moves(running, {"a": 2}, ["a"], ["c"], count=5)) == 2
    assert choose_moves(running, {"a": 2}, ["a"], ["c"], count=0) == []
    assert choose_moves(running, {"a": 2}, ["a"], [], count=2) == []
    assert len({m.request_id for m in choose_moves(running, {"a": 2}, ["a"], ["c", "d"], count=2)}) == 2


def test_servers_on_other_weights_refuse_naming_each_version():
    check_versions({"a": 3, "b": 3, "c": 3})
    with pytest.raises(MigrationRefused, match="a: 3, b: 3, c: 2.*push must land"):
        check_versions({"a": 3, "b": 3, "c": 2})


class _Engine:
    """What the abort touches of vLLM's ``AsyncLLM`` (its output processor and engine-core client), by hand."""

    def __init__(self, running: dict[str, list[str]]) -> None:
        self.running = running  # the id a request was sent with -> vLLM's internal ids of it
        self.output_processor = self
        self.engine_core = self
        self.core_aborts: list[list[str]] = []

    def abort_requests(self, request_ids, internal):
        assert internal is False, "the ids a client sent: vLLM maps them to its own"
        return [i for r in request_ids for i in self.running.pop(r, [])]

    async def abort_requests_async(self, internal_ids):
        self.core_aborts.append(internal_ids)


def test_verl_s_vllm_server_aborts_through_vllm_s_own_abort_by_the_id_sent():
    """verl's ``abort_request`` looks the id up among vLLM 0.27's internal ids (the id + 8 random characters) and
    misses; the migration's call ends the stream by the id sent, then drops the request in the engine."""
    import asyncio
    from types import SimpleNamespace

    from verl_split.runtime.shared_rollout.migration import _abort_in_engine

    server = SimpleNamespace(engine=_Engine({"r1": ["r1-0a1b2c3d"]}), global_steps=4)

    async def run():
        moved = _abort_in_engine(server, "r1")
        ended = _abort_in_engine(server, "r1")  # ended (or moved) already: not moved again
        await asyncio.sleep(0)
        return moved, ended

    moved, ended = asyncio.run(run())
    assert moved == {"aborted": True, "request_id": "r1"} and ended["aborted"] is False
    assert server.engine.core_aborts == [["r1-0a1b2c3d"]]
