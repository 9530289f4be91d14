"""``advise`` on values streamed into generation's tail (``tools/advise/streaming.py``): the floor of what the tail
hides, worked by hand, and the notes it writes from synthetic split runs, with and without the reference moved to
the critic pool. Synthetic logs, not measurements."""

from __future__ import annotations

import pytest
from support.advise_profiles import SUBLINEAR, split_step, stock_step, write_run

from verl_split.core import metric_names as names
from verl_split.placement import Cluster
from verl_split.tools.advise.runs import read_run
from verl_split.tools.advise.streaming import forecast_step, hidden_work

pytestmark = pytest.mark.unit

CLUSTER = Cluster(1, 8)


def test_the_tail_hides_what_is_ready_and_fits_before_generation_ends():
    # 4 s of values, 20 s of generation, mean length a quarter of the longest: at x of generation at least
    # 1 - 0.25 / x of the samples are done and 20 (1 - x) s remain. The two meet at 20x^2 - 16x - 1 = 0,
    # x = (16 + sqrt(336)) / 40 = 0.858, 2.83 s; on the grid of hundredths x = 0.85: 4 (1 - 0.25 / 0.85) = 2.82 s.
    found = hidden_work(4.0, gen=20.0, busy=0.0, mean=100.0, longest=400.0)
    assert found.hidden == pytest.approx(4 * (1 - 0.25 / 0.85))
    assert found.share == 0.85 and found.left == pytest.approx(4.0 - found.hidden)


def test_a_critic_pool_busy_through_generation_hides_nothing():
    assert hidden_work(4.0, gen=20.0, busy=20.0, mean=100.0, longest=400.0).hidden == 0.0


def test_answers_of_one_length_have_no_tail_to_hide_values_in():
    # Every sample ends with the longest: none is ready before generation's end.
    assert hidden_work(4.0, gen=20.0, busy=0.0, mean=400.0, longest=400.0).hidden == 0.0


def test_a_busy_start_leaves_the_rest_of_generation():
    # The deferred update holds the critic pool 18 s of 20: 2 s remain, and from half of generation on at least
    # 1 - 0.25 / 0.5 = half of the 4 s (2 s) is ready: 2 s hidden.
    assert hidden_work(4.0, gen=20.0, busy=18.0, mean=100.0, longest=400.0).hidden == pytest.approx(2.0)


def step_with_tail(ref: float = 2.0, **extra) -> dict:
    step = split_step(SUBLINEAR, 4, 4)  # gen 12 s, old_log_prob + ref 5 s, values 5 s, overlapped preparation
    step.update({"response_length/mean": 100.0, "response_length/max": 400.0, "timing_s/ref": ref, **extra})
    return step


def lanes_of(step):
    names_ = ("actor_prep", "critic_prep", "critic_update")
    keys = ("split/prep_actor_s", "split/prep_critic_s", "split/critic_update_s")
    return {lane: step[key] for lane, key in zip(names_, keys, strict=True)}


def test_the_step_forecast_takes_the_values_left_beside_old_log_prob_and_ref():
    step = step_with_tail()
    f = forecast_step(step, lanes_of(step), 4, 4)
    # Values 5 s in 12 s of generation, the critic pool free from its start: at x = 0.72, 5 (1 - 0.25 / 0.72) =
    # 3.26 s ready and 12 x 0.28 = 3.36 s left to run them (at 0.73: 3.29 s ready, 3.24 s left, less).
    assert f.values.hidden == pytest.approx(5 * (1 - 0.25 / 0.72))
    # The preparation stays old_log_prob + ref's 5 s: the values left (1.74 s) run beside it.
    assert (f.prep, f.streamed) == (5.0, 5.0)
    # The reference moved: the actor's side 5 - 2 = 3 s; the critic's 5 + 2 = 7 s streamed meet the window near
    # x = 0.64 (12x^2 - 5x - 1.75 = 0): about 4.3 s hidden, 2.7 s left, under the actor's 3 s.
    assert f.moved == 3.0


def test_a_deferred_critic_update_holds_the_critic_pool_first():
    # The deferred update (9 s) leaves 3 s of the 12; from x = 0.6 on at least 5 (1 - 0.25 / 0.6) = 2.92 s ready,
    # at 0.63 and after more than 3 s: 3 s hidden, 2 s left beside the actor's 5 s.
    step = step_with_tail(**{names.CRITIC_UPDATE_DEFERRED: 1.0})
    f = forecast_step(step, lanes_of(step), 4, 4)
    assert f.values.hidden == pytest.approx(3.0) and f.streamed == 5.0


def test_a_run_without_response_lengths_gets_no_forecast_and_says_why(tmp_path):
    steps = [split_step(SUBLINEAR, 4, 4) for _ in range(4)]
    run = read_run(write_run(tmp_path / "split.jsonl", steps), CLUSTER)
    (note,) = [n for n in run.notes if "streamed values" in n]
    assert "no response_length/mean and response_length/max" in note


def test_a_split_run_with_a_tail_gets_the_forecast_and_the_references_verdict(tmp_path):
    # Values 12 s against old_log_prob + ref 5 s: the preparation is the critic's. At half of generation (6 s in)
    # half the samples are done: 6 s of values hidden, 6 s left, the step 27 -> 21 s. The reference's 2 s moved to
    # the critic pool make its side longer again (14 s streamed).
    steps = [step_with_tail(**{"split/prep_critic_s": 12.0, "split/prep_wall_s": 12.0}) for _ in range(4)]
    run = read_run(write_run(tmp_path / "split.jsonl", steps), CLUSTER)
    (stream,) = [n for n in run.notes if n.startswith("streamed values (VERL_SPLIT_STREAM_VALUES=on)")]
    assert "of the values' 12.00 s a step at least 6.00 s run inside generation" in stream
    assert "the step 27.00 s -> at most 21.00 s (22 % shorter)" in stream
    (ref,) = [n for n in run.notes if n.startswith("the reference on the critic pool")]
    assert "does not pay" in ref and "timing_s/ref 2.00 s" in ref


def test_the_reference_moves_when_the_actors_preparation_is_the_longer_side(tmp_path):
    # old_log_prob + ref 9 s (ref 4 s) against values 2 s: moved, the actor's side is 5 s, the critic's 6 s
    # streamed into a 12 s generation with a long tail (mean an eighth of the longest): at x = 0.5, 6 x 0.75 =
    # 4.5 s ready, 6 s of window: 1.5 s or less left, the preparation 9 -> 5 s.
    extra = {"split/prep_actor_s": 9.0, "split/prep_critic_s": 2.0, "split/prep_wall_s": 9.0}
    steps = [step_with_tail(ref=4.0, **{**extra, "response_length/mean": 50.0}) for _ in range(4)]
    run = read_run(write_run(tmp_path / "split.jsonl", steps), CLUSTER)
    (ref,) = [n for n in run.notes if n.startswith("the reference on the critic pool")]
    assert "pays: the step 15 % shorter again (4.00 s)" in ref


def test_a_streamed_run_reports_what_it_measured(tmp_path):
    extra = {names.VALUES_AFTER_GEN_S: 0.4, names.STREAM_COVERAGE: 0.9}
    steps = [step_with_tail(**extra) for _ in range(4)]
    run = read_run(write_run(tmp_path / "split.jsonl", steps), CLUSTER)
    (measured,) = [n for n in run.notes if n.startswith("streamed values, measured")]
    assert "0.40 s of values left after generation" in measured and "90 %" in measured


def test_a_stock_run_gets_no_streaming_note(tmp_path):
    step = {**stock_step(SUBLINEAR, 8), "response_length/mean": 100.0, "response_length/max": 400.0}
    run = read_run(write_run(tmp_path / "stock.jsonl", [dict(step) for _ in range(4)]), CLUSTER)
    assert not [n for n in run.notes if "streamed" in n or "reference on the critic pool" in n]
