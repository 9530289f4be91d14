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
