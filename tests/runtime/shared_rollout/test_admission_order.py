"""Longest-predicted-first admission (``admission.py``): the order queued requests get their slots in, on the
real balancer class (its coroutines driven by hand: a slot freed, one request woken), and the setting."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from verl_split.core import settings
from verl_split.core.errors import SettingsError
from verl_split.runtime.shared_rollout import balancer as balancer_module
from verl_split.runtime.shared_rollout.admission import LONGEST_FIRST, VERL_ORDER, AdmissionQueue
from verl_split.runtime.shared_rollout.balancer import SharedRolloutBalancer

pytestmark = pytest.mark.unit


def test_the_longest_predicted_first_ties_and_unknowns_in_arrival_order():
    queue = AdmissionQueue(LONGEST_FIRST)
    for key, tokens in (("p-short", 50), ("p-long", 500), ("p-mid", 200)):
        queue.predictor.finished(key, tokens)  # the last epoch's lengths
    for i, key in enumerate(("p-short", "p-new", "p-long", "p-mid", "p-long", None)):
        queue.append(f"q{i}", waiter=None, key=key)
    # Unknown prompts rank at the mean known length (250): after the long ones, before the mid and short ones.
    assert queue.order_of() == ["q2", "q4", "q1", "q5", "q3", "q0"]
    assert [queue.popleft()[0] for _ in range(len(queue))] == ["q2", "q4", "q1", "q5", "q3", "q0"]
    assert not queue


def test_a_first_finished_sibling_moves_its_waiting_siblings_up():
    queue = AdmissionQueue(LONGEST_FIRST)
    queue.predictor.finished("a", 100)
    for i, key in enumerate(("a", "b", "b", "a")):
        queue.append(f"q{i}", waiter=None, key=key)
    assert queue.order_of() == ["q0", "q1", "q2", "q3"]  # b unknown: ranks at the mean (100), arrival order
    queue.finished("b", 900)  # b's first sibling (already running) ended long
    assert queue.order_of() == ["q1", "q2", "q0", "q3"]
    assert len(queue) == 4
    assert queue.peek()[0] == "q1"


def test_verl_order_is_arrival_order_whatever_is_known():
    queue = AdmissionQueue(VERL_ORDER)
    queue.predictor.finished("long", 1000)
    for i, key in enumerate(("short", "long", None)):
        queue.append(f"q{i}", None, key)
    assert queue.order_of() == ["q0", "q1", "q2"]


@pytest.fixture
def clock(monkeypatch):
    """The balancer's clock, moved by hand: how long a request held its server is given, not measured."""
    now = [100.0]
    fake = SimpleNamespace(monotonic=lambda: now[0], thread_time=time.thread_time)
    monkeypatch.setattr(balancer_module, "time", fake)
    return now


def test_the_balancer_hands_freed_slots_to_the_longest_predicted_and_learns_from_releases(clock):
    short, long = [1, 2, 3], [4, 5, 6]  # two prompts' tokens: verl 0.9.1's clients send them with each acquire

    async def run(order):
        balancer = SharedRolloutBalancer(servers={"h": "h"}, admission_order=order)
        assert balancer.require_release_fields() == ["request_id"]
        balancer.gate(parked=[], caps={"h": 1})
        # Last epoch: the same prompts held their server 3 s and 70 s.
        first, _ = await balancer.acquire_server(request_id="e0-short", prompt_ids=short)
        clock[0] += 3.0
        await balancer.release_server(first, request_id="e0-short")
        await balancer.acquire_server(request_id="e0-long", prompt_ids=long)
        # This step: the server is full, so these queue: the short prompt first in arrival, the long one second.
        waiting = {
            rid: asyncio.ensure_future(balancer.acquire_server(request_id=rid, prompt_ids=ids))
            for rid, ids in (("s", short), ("l", long))
        }
        for _ in range(3):
            await asyncio.sleep(0)
        clock[0] += 70.0
        await balancer.release_server("h", request_id="e0-long")
        for _ in range(3):
            await asyncio.sleep(0)
        return balancer.require_acquire_fields(), [rid for rid, w in waiting.items() if w.done()]

    assert asyncio.run(run(LONGEST_FIRST)) == (["prompt_ids"], ["l"])
    assert asyncio.run(run(VERL_ORDER)) == ([], ["s"])


@pytest.mark.parametrize(
    ("raw", "order"), [(None, LONGEST_FIRST), ("longest_first", LONGEST_FIRST), ("verl", VERL_ORDER)]
)
def test_the_setting_chooses_the_order(raw, order):
    env = {"VERL_SPLIT": "1"} | ({} if raw is None else {"VERL_SPLIT_TAIL": raw})
    assert settings.read(env).tail == order


def test_an_unknown_order_is_refused_naming_the_values():
    with pytest.raises(SettingsError, match="VERL_SPLIT_TAIL='shortest'.*longest_first.*verl"):
        settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_TAIL": "shortest"})


def test_in_arrival_order_the_open_fills_the_joiners_to_their_caps_and_a_release_wakes_the_queue_head_alone():
    """The late join under ``VERL_SPLIT_TAIL=verl`` with the runtime's caps: the joiner takes what its cap lets it,
    in arrival order, the rest waits; each release hands one slot, to the request queued longest."""
    caps = balancer_module.caps_for_late_join(6, ["h"], ["c"], reach=1.0, concurrency=1)
    assert caps == {"h": 2, "c": 2}

    async def run():
        balancer = SharedRolloutBalancer(servers={"h": "h", "c": "c"}, admission_order=VERL_ORDER)
        balancer.gate(parked=["c"], caps=caps)
        acquires = [asyncio.ensure_future(balancer.acquire_server(request_id=f"q{i}")) for i in range(6)]
        for _ in range(3):
            await asyncio.sleep(0)

        def served() -> list[str]:
            return [f"q{i}" for i, a in enumerate(acquires) if a.done()]

        assert served() == ["q0", "q1"] and balancer._waiting.order_of() == ["q2", "q3", "q4", "q5"]
        await balancer.open(["c"])
        for _ in range(3):
            await asyncio.sleep(0)
        assert served() == ["q0", "q1", "q2", "q3"] and [acquires[i].result()[0] for i in (2, 3)] == ["c", "c"]
        await balancer.release_server("h", request_id="q0")
        for _ in range(3):
            await asyncio.sleep(0)
        assert served() == ["q0", "q1", "q2", "q3", "q4"] and acquires[4].result()[0] == "h"
        assert balancer._waiting.order_of() == ["q5"]
        await balancer.ungate()  # the step's end: the rest drains at once
        await asyncio.gather(*acquires)

    asyncio.run(run())
