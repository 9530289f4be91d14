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
    """What the abort touches of vLLM's ``AsyncLLM`` (its output processor and ``abort``), by hand."""

    def __init__(self, running: set[str]) -> None:
        self.running = running  # the ids requests were sent with
        self.output_processor = self
        self.output_handler = None
        self.aborted: list[str] = []

    @property
    def external_req_ids(self) -> set[str]:
        return self.running

    async def abort(self, request_id: str) -> None:
        self.running.discard(request_id)
        self.aborted.append(request_id)


def test_verl_s_vllm_server_aborts_through_vllm_s_own_abort_on_the_server_s_loop():
    """verl's ``abort_request`` looks the id up among vLLM 0.27's internal ids (the id + 8 random characters) and
    misses; the migration's call aborts by the id sent, on the loop vLLM's engine client runs on (Ray runs it on
    another thread of the actor's)."""
    import asyncio
    from types import SimpleNamespace

    from verl_split.runtime.shared_rollout.migration import _abort_in_engine

    server = SimpleNamespace(engine=_Engine({"r1"}))
    assert _abort_in_engine(server, "r1")["aborted"] is False, "nothing has run: no loop to abort on"

    async def serve():
        server.engine.output_handler = asyncio.current_task()
        answers = []
        for request_id in ["r1", "r1", "r2"]:  # r1 again: moved already; r2: never here
            answers.append(await asyncio.to_thread(_abort_in_engine, server, request_id))
        return answers

    answers = asyncio.run(serve())
    assert [a["aborted"] for a in answers] == [True, False, False]
    assert server.engine.aborted == ["r1"]
