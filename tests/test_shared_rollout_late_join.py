"""The critic pool joining generation late (verl_split/runtime/shared_rollout/late_join.py, balancer.py).

The balancer is verl-split's subclass of verl's own ``GlobalRequestLoadBalancer``, driven as its Ray actor
would run it, on one asyncio loop, without Ray. The checkpoint managers are the fakes of
test_shared_rollout_unit.py, and the deferred critic update a plain future: these test our coordination
(what waits for what, which server gets which request, the metrics) in seconds. The real runs are in
tests/e2e/test_shared_rollout_e2e.py. No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from types import SimpleNamespace

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("shared rollout is built on verl 0.9's load balancer and managers", allow_module_level=True)

from test_shared_rollout_unit import FakeBalancer, FakeManager, replica  # noqa: E402

from verl_split.runtime.overlap import deferral  # noqa: E402
from verl_split.runtime.shared_rollout import both_pools  # noqa: E402
from verl_split.runtime.shared_rollout.balancer import SharedRolloutBalancer, caps_for_late_join  # noqa: E402
from verl_split.runtime.shared_rollout.both_pools import BothPoolsCheckpointManager, SharedRolloutError  # noqa: E402

pytestmark = pytest.mark.unit


# --------------------------------------------------------------------------- the balancer


def servers(*names: str) -> dict[str, str]:
    return {name: f"handle-{name}" for name in names}


def test_ungated_routing_is_verls_and_every_request_is_counted_once():
    async def run():
        balancer = SharedRolloutBalancer(servers=servers("a", "b"))
        picked = [(await balancer.acquire_server(request_id=f"r{i}"))[0] for i in range(10)]
        for server in picked:
            await balancer.release_server(server)
        step = balancer.take_step()
        assert step["routed"] == {s: picked.count(s) for s in set(picked)} and sum(step["routed"].values()) == 10
        assert step["generation_s"] >= 0.0 and step["opened_after_s"] is None
        assert balancer.take_routed() == {}
        # A sticky request (a later turn of the same conversation) is routed, so counted, again.
        server, _ = await balancer.acquire_server(request_id="r0")
        assert server == picked[0] and balancer.take_routed() == {server: 1}

    asyncio.run(run())


def test_parked_servers_get_nothing_and_queued_requests_go_to_them_when_they_open():
    async def run():
        balancer = SharedRolloutBalancer(servers=servers("h", "c"))
        balancer.gate(parked=["c"], caps={"h": 2, "c": 2})
        first = [await balancer.acquire_server(request_id=f"r{i}") for i in range(2)]
        assert [server for server, _ in first] == ["h", "h"]
        waiting = [asyncio.ensure_future(balancer.acquire_server(request_id=f"q{i}")) for i in range(3)]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiting)  # h is at its cap, c is parked: they wait, here
        await balancer.open(["c"])
        await asyncio.sleep(0.05)
        assert sorted(w.result()[0] for w in waiting if w.done()) == ["c", "c"]  # c's cap is 2
        await balancer.release_server("h")  # a slot on h: the last one goes there
        await asyncio.sleep(0.05)
        assert all(w.done() for w in waiting) and sorted(w.result()[0] for w in waiting) == ["c", "c", "h"]
        step = balancer.take_step()
        assert step["routed"] == {"h": 3, "c": 2} and step["opened_after_s"] > 0.0

    asyncio.run(run())


def test_a_conversation_s_next_turn_stays_on_its_server_past_the_cap():
    async def run():
        balancer = SharedRolloutBalancer(servers=servers("h", "c"))
        balancer.gate(parked=["c"], caps={"h": 1, "c": 1})
        assert (await balancer.acquire_server(request_id="conv"))[0] == "h"
        assert (await balancer.acquire_server(request_id="conv"))[0] == "h"  # sticky, though h is full

    asyncio.run(run())


def test_caps_leave_an_even_share_queued_at_first_and_follow_what_the_critic_pool_took():
    assert caps_for_late_join(128, ["h"], ["c"], 1.0) == {"h": 64, "c": 64}
    assert caps_for_late_join(128, ["h"], ["c"], 0.25) == {"h": 103, "c": 64}
    assert caps_for_late_join(12, ["h0", "h1"], ["c0"], 1.0) == {"h0": 4, "h1": 4, "c0": 4}
    # No more than a server runs at once (the CPU rollout's one request, vLLM's max_num_seqs) and one ready behind.
    assert caps_for_late_join(128, ["h"], ["c"], 1.0, concurrency=1) == {"h": 2, "c": 2}
    assert caps_for_late_join(128, ["h"], ["c"], 1.0, concurrency=256) == {"h": 64, "c": 64}


# --------------------------------------------------------------------------- the late join


@pytest.fixture
def late(monkeypatch):
    """Both managers with a deferred critic update running: the future a test ends when it likes."""
    monkeypatch.setattr(both_pools.ray, "get", lambda value, **_: value)
    monkeypatch.setattr(both_pools, "dead_replicas", lambda replicas: [r.replica_rank for r in replicas])
    critic_update: concurrent.futures.Future = concurrent.futures.Future()
    monkeypatch.setattr(deferral, "running_update", lambda: None if critic_update.done() else critic_update)
    journal: list = []
    trainer = SimpleNamespace()
    hybrid = FakeManager("hybrid", journal, [replica(0, "h")])
    shared = FakeManager("shared", journal, [replica(1, "c")])
    balancer = FakeBalancer({"h": 6, "c": 2}, journal)
    manager = BothPoolsCheckpointManager(trainer, hybrid, shared, balancer, requests_per_step=8)
    return SimpleNamespace(
        trainer=trainer, journal=journal, manager=manager, shared=shared, balancer=balancer, critic=critic_update
    )


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_actor_pool_syncs_at_once_and_the_critic_pool_joins_after_the_critic_update(late):
    assert late.manager.update_weights(4) == "hybrid-result"
    assert late.journal == [
        ("balancer", "gate", ["c"], {"h": 4, "c": 4}),  # parked before any request of the step
        ("hybrid", "update_weights", 4),  # the actor pool generates now
    ]
    time.sleep(0.1)
    assert len(late.journal) == 2  # the critic pool's replicas sleep while the critic updates
    late.critic.set_result("critic done")
    wait_for(lambda: len(late.journal) == 5)
    assert late.journal[2:] == [
        ("shared", "wake_up_replicas"),
        ("shared", "update_weights", 4),
        ("balancer", "open", ["c"]),
    ]
    late.balancer.step = {"generation_s": 3.0, "opened_after_s": 1.0}  # as the balancer timed the step
    late.manager.sleep_replicas()
    assert late.journal[5:] == [("hybrid", "sleep_replicas"), ("shared", "sleep_replicas")]
    pending = late.trainer._pending_sync_metrics
    assert pending["split/critic_pool_joined"] == 1.0 and pending["split/critic_pool_rollout_share"] == 2 / 8
    assert pending["split/critic_pool_join_s"] == 1.0
    # The actor pool kept 6 requests in 3 s: the critic pool's 2 would have taken it 1 s more.
    assert pending["split/shared_rollout_saved_s"] == pytest.approx(1.0)
    assert pending["split/shared_rollout_sync_s"] >= 0.0  # the push, off the step's path
    assert late.manager._reach == pytest.approx((2 / 8) / (1 / 2))  # a quarter against an even half


def test_generation_that_ends_before_the_critic_update_leaves_the_critic_pool_asleep(late):
    late.balancer.routed = {"h": 8}
    late.manager.update_weights(4)
    late.manager.sleep_replicas()  # generation over; the critic still updates
    late.critic.set_result("critic done")
    time.sleep(0.1)
    assert [(who, what) for who, what, *_ in late.journal] == [
        ("balancer", "gate"),
        ("hybrid", "update_weights"),
        ("hybrid", "sleep_replicas"),  # the critic pool was never woken, so it is not put to sleep either
    ]
    assert late.trainer._pending_sync_metrics["split/critic_pool_joined"] == 0.0
    assert late.manager._reach == both_pools.MIN_REACH  # it took nothing: next step leaves it the least


def test_generation_that_ends_during_the_push_waits_for_it_before_sleeping(late, monkeypatch):
    pushing = threading.Event()
    original = late.shared.update_weights

    def slow_push(global_steps=None):
        pushing.set()
        time.sleep(0.3)
        return original(global_steps)

    monkeypatch.setattr(late.shared, "update_weights", slow_push)
    late.manager.update_weights(4)
    late.critic.set_result("critic done")
    assert pushing.wait(5)
    late.manager.sleep_replicas()
    whats = [(who, what) for who, what, *_ in late.journal]
    assert whats.index(("balancer", "open")) < whats.index(("shared", "sleep_replicas"))


def test_a_failed_push_during_generation_stops_the_run_at_its_end_naming_the_replica(late):
    late.shared.fail = "update_weights"
    late.manager.update_weights(4)
    late.critic.set_result("critic done")
    wait_for(lambda: ("shared", "update_weights", 4) in late.journal)
    with pytest.raises(SharedRolloutError, match=r"critic pool's rollout replicas: replica\(s\) \[1\] died"):
        late.manager.sleep_replicas()


def test_a_failed_critic_update_never_wakes_the_critic_pool(late):
    late.manager.update_weights(4)
    late.critic.set_exception(RuntimeError("critic died"))  # the deferral raises it on the trainer's thread
    time.sleep(0.1)
    late.manager.sleep_replicas()
    assert ("shared", "wake_up_replicas") not in late.journal


def test_without_a_critic_update_running_the_push_comes_first_as_before(late):
    late.critic.set_result("done before the sync")
    late.manager.update_weights(5)
    assert [(who, what) for who, what, *_ in late.journal] == [
        ("shared", "wake_up_replicas"),
        ("shared", "update_weights"),
        ("balancer", "ungate"),
        ("hybrid", "update_weights"),
    ]
