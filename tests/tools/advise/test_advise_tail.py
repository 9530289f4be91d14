"""``advise`` on generation's tail (``tools/advise/tail.py``): what it says from the ``split/generation_*`` metrics of
a run's steps, and that it says nothing from verl's own keys."""

from __future__ import annotations

import pytest

from verl_split.core import metric_names as names
from verl_split.tools.advise.tail import tail_notes

pytestmark = pytest.mark.unit


def step(over: float, tail: float = 10.0, work: float = 6.0, batch: float = 2.0) -> dict:
    return {
        "step": 1,
        "timing_s/gen": tail * (1 + over),
        names.GENERATION_TAIL_FLOOR_S: tail,
        names.GENERATION_WORK_FLOOR_S: work,
        names.GENERATION_OVER_FLOOR: over,
        names.GENERATION_TAIL_BATCH: batch,
    }


def test_steps_at_their_tail_floor_say_no_scheduling_shortens_generation():
    (note,) = tail_notes([step(0.01), step(0.02), step(0.5)])
    assert "on average 18 % above it over 3 steps" in note
    assert "'nothing'" in note and "no routing, join or move shortens it" in note


def test_steps_at_their_tail_floor_at_a_large_batch_say_migrate():
    (note,) = tail_notes([step(0.0, batch=64.0), step(0.01, batch=64.0)])
    assert "'migrate'" in note


def test_steps_far_above_their_floor_say_join():
    (note,) = tail_notes([step(0.6), step(0.7)])
    assert "'join'" in note


def test_a_log_with_verls_keys_alone_says_nothing_of_the_tail():
    assert tail_notes([{"step": 1, "timing_s/gen": 30.0, "response_length/max": 512.0}]) == []
