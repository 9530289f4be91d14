"""The late join's rate model (``late_join.join_pays``) against the control-plane benchmark's own event model, on
long-tailed response lengths: a lognormal fitted to a published verl run (``benchmarks/control_plane_model.py``).

The event model schedules every request of a step on the servers' slots, first come first served, as verl-split's
gate queues them; the balancer's ``progress`` at a decision time is read off that schedule. What the rate model
forecasts is then checked against what the schedule does after the decision: how long the actor pool alone takes
to route the rest of the queue, whether requests are still queued when the push ends. No Ray, no verl trainer.
"""

from __future__ import annotations

import importlib

import pytest
from support.paths import ROOT

from verl_split.runtime.shared_rollout.late_join import RATE_MIN_RELEASES, RATE_WINDOW_S, join_pays, recent_releases

pytestmark = pytest.mark.unit

#: The benchmark's servers: 24 on the actor pool, 8 on the critic pool.
HYBRID, SHARED = 24, 8
#: A mean response's seconds on a server (the benchmark's default is of this order; the model scales with it).
MEAN_S = 8.0
SEEDS = range(3)


@pytest.fixture(scope="module")
def model():
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        module = importlib.import_module("control_plane_model")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    module.schedules = {}  # (requests, slots, seed) -> the schedule: each is made once for every test here
    return module


def steps(model, requests: int, slots: int):
    """(seed, the schedule with the actor pool alone) for each seed: ``requests`` of the published lengths."""
    for seed in SEEDS:
        key = (requests, slots, seed)
        if key not in model.schedules:
            tokens = model.PUBLISHED_LENGTHS.draw(requests, seed)
            durations = [t / model.PUBLISHED_MEAN_TOKENS * MEAN_S for t in tokens]
            model.schedules[key] = model.shared_queue(durations, HYBRID * slots)
        yield seed, model.schedules[key]


def decision_points(schedule, slots: int, settled: bool):
    """Times across the queue's life (the last request routed at ``last``); ``settled``: only those where a quarter
    of the first requests' slots have ended (before that the pool's rate is still rising as the first wave ends)."""
    last = max(schedule.starts)
    for i in range(1, 20):
        t = last * i / 20
        progress = schedule.progress_at(t)
        if not settled or progress["released"] >= HYBRID * slots / 4:
            yield t, progress


# The benchmark's size (16,384 requests on 24 servers of 256 sequences) and the same queue on smaller servers.
SIZES = [(16384, 256), (4096, 64), (16384, 128)]


@pytest.mark.parametrize(("requests", "slots"), SIZES)
def test_the_forecast_follows_the_queue_on_long_tailed_lengths(model, requests, slots):
    # The average rate since the step's first request (the rule before) forecast 1.07-2.4x the time the queue took
    # here, always too long; the actor pool's recent rate stays within a quarter of it.
    for seed, alone in steps(model, requests, slots):
        last = max(alone.starts)
        for t, progress in decision_points(alone, slots, settled=True):
            forecast = join_pays(requests, progress, HYBRID, SHARED, push_s=1.0)
            truth = last - t  # the event model's seconds until the actor pool alone has routed the last request
            assert forecast.alone_s == pytest.approx(truth, rel=0.25), (seed, t, forecast.why)


@pytest.mark.parametrize(("requests", "slots"), SIZES)
@pytest.mark.parametrize("push_s", [0.25, 1.0, 4.0, 16.0])
def test_a_join_is_made_where_the_queue_outlasts_the_push_and_never_ends_after_generation(
    model, requests, slots, push_s
):
    for seed, alone in steps(model, requests, slots):
        for t, progress in decision_points(alone, slots, settled=False):
            forecast = join_pays(requests, progress, HYBRID, SHARED, push_s=push_s)
            if forecast.pays:
                # The trainer never waits for the push at generation's end: generation outlasts it. (Joining cannot
                # lengthen the event model's step otherwise: more slots never start a request later.)
                assert t + push_s < alone.generation_s, (seed, t, forecast.why)
            queued_at_push_end = alone.queued_at(t + push_s)
            settled = progress["released"] >= HYBRID * slots / 4
            if settled and queued_at_push_end >= 0.1 * progress["queued"]:
                # A tenth of the queue still waits when the push ends: the critic pool would take some.
                assert forecast.pays, (seed, t, queued_at_push_end, forecast.why)
            if settled and queued_at_push_end == 0 and alone.queued_at(t + 0.8 * push_s) == 0:
                # The queue is gone well before the push would end: no join for nothing.
                assert not forecast.pays, (seed, t, forecast.why)


def test_the_recent_rate_is_the_last_seconds_or_the_last_releases():
    # 40 ended in the last 2 s (one every 0.05 s up to now, 10 s into the step): 40 over RATE_WINDOW_S.
    times = [9.975 - 0.05 * i for i in range(200)][::-1]
    assert RATE_WINDOW_S == 2.0 and recent_releases(times, 10.0, 10.0) == (40, 2.0)
    # Only 3 ended, 1 s apart, the last 4 s ago: the last 3 (fewer than RATE_MIN_RELEASES) over the 6 s since the
    # first of them: not the 2 s window, where nothing ended, which would read as no rate at all.
    assert RATE_MIN_RELEASES > 3 and recent_releases([2.0, 3.0, 4.0], 8.0, 9.0) == (3, 6.0)
    # Half a second into the step, the window is the half second.
    assert recent_releases([0.1 * i for i in range(1, 6) for _ in range(10)], 0.5, 0.5) == (50, 0.5)
    assert recent_releases([], 5.0, 5.0) == (0, 0.0)
