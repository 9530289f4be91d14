"""Generation's floor (``floor.py``) and the advice it supports, from ledgers written by hand: times are given, not
measured, so every figure is exact."""

from __future__ import annotations

import asyncio

import pytest

from verl_split.core import metric_names as names
from verl_split.runtime.shared_rollout.balancer import SharedRolloutBalancer
from verl_split.runtime.shared_rollout.floor import Floor, StepLedger, advice, floor_from_metrics

pytestmark = pytest.mark.unit


def ledger_of(requests: list[tuple[str, float, float, int]]) -> StepLedger:
    """(server, start, end, tokens) per request."""
    ledger = StepLedger()
    for i, (server, start, _, _) in enumerate(requests):
        ledger.started(f"r{i}", server, start)
    for i, (_, _, end, tokens) in enumerate(requests):
        ledger.ended(f"r{i}", end, tokens)
    return ledger


def test_a_long_request_alone_at_the_end_is_the_tail_floor_and_generation_sits_on_it():
    # Server a: one 10 s request beside two short ones; server b: two short ones. The step ends with the long one.
    floor = ledger_of(
        [("a", 0.0, 10.0, 100), ("a", 0.0, 2.0, 20), ("a", 2.0, 4.0, 20), ("b", 0.0, 2.0, 20), ("b", 2.0, 4.0, 20)]
    ).floor()
    assert floor.generation_s == 10.0
    assert floor.tail_s == 10.0
    # a held requests 10 s for 140 tokens, b 4 s for 40: 14 + 10 tokens/s; 180 tokens over 24 tokens/s.
    assert floor.work_s == pytest.approx(180 / 24)
    assert floor.tail_bound and floor.over_floor == 0.0
    # The long request ran beside one other for 4 s of its 10: a mean batch of 1.4.
    assert floor.tail_batch == pytest.approx((2 * 4 + 1 * 6) / 10)
    assert floor.tail_tokens == 100
    assert advice(floor).action == "nothing"


def test_a_step_that_started_its_long_request_late_is_over_its_floor_and_a_join_or_order_can_win():
    floor = ledger_of([("a", 0.0, 4.0, 40), ("a", 4.0, 8.0, 40), ("a", 8.0, 18.0, 100), ("b", 0.0, 4.0, 40)]).floor()
    assert floor.generation_s == 18.0 and floor.tail_s == 10.0
    # Each server kept 10 tokens/s: 220 tokens over 20 tokens/s is an 11 s work floor, above the 10 s tail.
    assert floor.work_s == pytest.approx(11.0) and not floor.tail_bound
    assert floor.over_floor == pytest.approx(18 / 11 - 1)
    assert advice(floor).action == "join"


def test_a_long_request_at_a_large_batch_is_moved_and_a_busy_step_at_its_work_floor_is_joined():
    # The long request ran its whole 10 s beside 15 others (batch 16), all of them ending with it.
    crowded = ledger_of([("a", 0.0, 10.0, 100)] + [("a", 0.0, 10.0, 60)] * 15).floor()
    assert crowded.tail_batch == pytest.approx(16)
    assert crowded.over_floor == 0.0 and crowded.tail_bound
    assert advice(crowded, joiner_batch=1).action == "migrate"
    assert advice(crowded, joiner_batch=8).action == "nothing"  # the joiners would run it about as fast
    # Equal requests back to back on one server: the servers' capacity bounds the step, more servers shorten it.
    busy = ledger_of([("a", float(i), float(i + 1), 10) for i in range(10)]).floor()
    assert busy.work_s == pytest.approx(10.0) and busy.tail_s == 1.0 and not busy.tail_bound
    assert advice(busy).action == "join"


def test_a_resumed_request_counts_its_time_once_from_its_first_start_to_its_last_end():
    ledger = StepLedger()
    ledger.started("r", "a", 0.0)
    ledger.ended("r", 3.0)  # aborted on a (moved)
    ledger.started("r", "c", 3.5)
    assert ledger.running() == {"r": 0.0} and ledger.server_of("r") == "c"
    ledger.ended("r", 6.0, tokens=60)
    floor = ledger.floor()
    assert floor.tail_s == 6.0 and floor.requests == 1


def test_an_end_of_a_request_the_ledger_never_saw_start_is_not_this_step_s():
    ledger = StepLedger()
    ledger.ended("old", 1.0, 5)
    assert ledger.floor() is None and len(ledger) == 0


def test_the_metrics_carry_the_floor_and_advise_reads_it_back():
    floor = Floor(generation_s=12.0, tail_s=10.0, work_s=6.0, tail_batch=32.0, tail_tokens=None, requests=9, servers=2)
    metrics = floor.metrics()
    assert metrics[names.GENERATION_FLOOR_S] == 10.0
    assert metrics[names.GENERATION_OVER_FLOOR] == pytest.approx(0.2)
    back = floor_from_metrics(metrics)
    assert (back.generation_s, back.tail_s, back.work_s, back.tail_batch) == pytest.approx((12.0, 10.0, 6.0, 32.0))
    assert floor_from_metrics({names.GENERATION_TAIL_FLOOR_S: 1.0}) is None
    assert all(name in names.ALL for name in metrics)


def test_the_balancer_keeps_the_ledger_and_its_step_carries_the_floor():
    async def run():
        balancer = SharedRolloutBalancer(servers={"h": "h", "c": "c"})
        for i in range(4):
            await balancer.acquire_server(request_id=f"r{i}")
        for i in range(4):
            server = balancer.ledger.server_of(f"r{i}")
            await balancer.release_server(server, request_id=f"r{i}", response_tokens=10 * (i + 1))
        return balancer.take_step(), balancer.ledger

    step, fresh = asyncio.run(run())
    assert step["floor"][names.GENERATION_FLOOR_S] >= 0.0
    assert set(step["floor"]) == {
        names.GENERATION_FLOOR_S,
        names.GENERATION_TAIL_FLOOR_S,
        names.GENERATION_WORK_FLOOR_S,
        names.GENERATION_OVER_FLOOR,
        names.GENERATION_TAIL_BATCH,
    }
    assert len(fresh) == 0  # the next step starts its own


def test_a_ledger_of_16k_requests_gives_its_floor_without_quadratic_work():
    # 16,384 requests on 32 servers: the floor is one sort of 32k events. What is checked is the count of work, not
    # a time: every request is visited a bounded number of times.
    ledger = StepLedger()
    for i in range(16_384):
        ledger.started(f"r{i}", f"s{i % 32}", float(i // 32))
    for i in range(16_384):
        ledger.ended(f"r{i}", float(i // 32) + 1 + (i % 7), 100 + i % 7)
    floor = ledger.floor()
    assert floor.requests == 16_384 and floor.servers == 32
    assert floor.tail_s == 7.0


def test_the_console_table_shows_the_floor_of_each_run_that_logged_it():
    from verl_split.dryrun.report import phase_table

    plain = [{"step": s, "timing_s/gen": 3.0, "timing_s/step": 5.0} for s in (1, 2, 3)]
    with_floor = [
        {**row, names.GENERATION_FLOOR_S: 2.0, names.GENERATION_OVER_FLOOR: over}
        for row, over in zip(plain, (9.0, 0.5, 0.3), strict=True)
    ]
    table = phase_table([("stock", plain), ("shared", with_floor)])
    # The steady steps (2 and 3: step 1 pays start-up costs): a 2 s floor, 40 % over it on average.
    assert "gen floor, shared: 2.00s, generation +40% over it" in table
    assert "gen floor, stock" not in table


def test_the_late_join_sits_out_after_a_step_at_its_tail_floor_and_asks_the_rate_model_otherwise():
    from verl_split.runtime.shared_rollout.both_pools import sit_out_at_floor

    at_tail = Floor(generation_s=10.2, tail_s=10.0, work_s=6.0, tail_batch=2.0, tail_tokens=None, requests=9, servers=2)
    forecast = sit_out_at_floor(at_tail.metrics(), requests=64)
    assert forecast is not None and not forecast.pays
    assert "no routing, join or move shortens it" in forecast.why
    above = Floor(generation_s=15.0, tail_s=10.0, work_s=6.0, tail_batch=2.0, tail_tokens=None, requests=9, servers=2)
    assert sit_out_at_floor(above.metrics(), requests=64) is None
    assert sit_out_at_floor(None, requests=64) is None  # no floor logged (verl 0.9.0): the rate model decides
