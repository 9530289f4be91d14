"""A rollout server that dies or hangs mid-generation (verl_split/runtime/shared_rollout/watchdog.py, balancer.py).

The balancer is verl-split's subclass of verl's own ``GlobalRequestLoadBalancer``, driven on one asyncio loop
without Ray, its clock stepped by the test; the watch's trainer side is given fakes of the checkpoint managers and
of the balancer's handle, and the servers' liveness (``liveness.dead_replicas``, on a real Ray in
test_watchdog_ray.py) answers what the test says. These test our coordination: which server is parked, what
the error names, that a wait is given up on. Real runs, verl's agent loop and trainers: tests/e2e/
test_shared_rollout_v0_e2e.py (a server killed mid-generation) and test_shared_rollout_e2e.py (the v1 trainer: one
that dies, one that hangs; --extended).
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("shared rollout is built on verl 0.9's load balancer and managers", allow_module_level=True)

from verl_split.runtime.shared_rollout import balancer as balancer_module  # noqa: E402
from verl_split.runtime.shared_rollout import both_pools, liveness, watchdog  # noqa: E402
from verl_split.runtime.shared_rollout.balancer import SharedRolloutBalancer  # noqa: E402
from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError  # noqa: E402

pytestmark = pytest.mark.unit


class Clock:
    """``time.monotonic`` as the balancer reads it, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(balancer_module.time, "monotonic", clock)
    return clock


def servers(*names: str) -> dict[str, str]:
    return {name: f"handle-{name}" for name in names}


# --------------------------------------------------------------------------- the balancer


def test_a_server_parked_dead_gets_nothing_gated_or_not_and_stays_parked():
    async def run():
        balancer = SharedRolloutBalancer(servers=servers("h", "c"))
        assert (await balancer.acquire_server(request_id="conv"))[0] in ("h", "c")
        sticky = balancer._request_id_to_server["conv"]
        balancer.park_dead([sticky])
        other = ({"h", "c"} - {sticky}).pop()
        # verl's own routing (no gate) and a conversation's next turn both avoid it.
        assert {(await balancer.acquire_server(request_id=f"r{i}"))[0] for i in range(6)} == {other}
        assert (await balancer.acquire_server(request_id="conv"))[0] == other
        await balancer.ungate()  # a later weight sync opens every server: not the dead one
        assert (await balancer.acquire_server(request_id="synced"))[0] == other
        balancer.gate(parked=[], caps={})
        assert (await balancer.acquire_server(request_id="late"))[0] == other
        assert balancer.take_step()["routed"].get(sticky, 0) == 1  # only the first, before it was parked

    asyncio.run(run())


def test_a_server_holding_requests_and_ending_none_past_the_limit_is_stalled(clock):
    async def run():
        balancer = SharedRolloutBalancer(servers=servers("h", "c"))
        balancer.gate(parked=[], caps={"h": 1, "c": 1})  # one each, so both hold a request
        held = [(await balancer.acquire_server(request_id=f"r{i}"))[0] for i in range(2)]
        assert sorted(held) == ["c", "h"]
        clock.now += 20
        await balancer.release_server("h")  # h ends one: its clock starts again
        h_again = await balancer.acquire_server(request_id="r2")
        assert h_again[0] == "h"
        assert balancer.stalled(30.0) == {}
        clock.now += 15  # c: 35 s without ending one; h: 15 s
        assert balancer.stalled(30.0) == {"c": {"in_flight": 1, "idle_s": 35.0}}
        await balancer.release_server("c")
        assert balancer.stalled(30.0) == {}  # it holds nothing now
        clock.now += 100
        assert balancer.stalled(30.0) == {"h": {"in_flight": 1, "idle_s": 115.0}}

    asyncio.run(run())


# --------------------------------------------------------------------------- the watch, the trainer's side


class FakeBalancerHandle:
    """The balancer actor as a Ray handle offers it: ``stalled`` answers what the test set, ``park_dead`` records."""

    def __init__(self) -> None:
        self.stalled_now: dict = {}
        self.parked: list[list[str]] = []
        self.stalled = SimpleNamespace(remote=lambda limit_s: dict(self.stalled_now))
        self.park_dead = SimpleNamespace(remote=self.parked.append)


def replica(rank: int) -> SimpleNamespace:
    return SimpleNamespace(replica_rank=rank, server_address=f"server-{rank}", servers=[])


@pytest.fixture
def watched(monkeypatch):
    """A watch over one actor-pool replica (0) and one critic-pool replica (1); ``dead`` is what the probe finds."""
    monkeypatch.setattr(both_pools.ray, "get", lambda value, **_: value)  # the fake handle answers directly
    dead: list[int] = []
    monkeypatch.setattr(liveness, "dead_replicas", lambda replicas, timeout_s: [r for r in dead])
    handle = FakeBalancerHandle()
    manager = SimpleNamespace(
        hybrid=SimpleNamespace(replicas=[replica(0)]),
        shared=SimpleNamespace(replicas=[replica(1)]),
        _balancer=handle,
    )
    watch = watchdog.Watch(manager, limit_s=30.0, probe_s=0.01)
    return SimpleNamespace(watch=watch, dead=dead, balancer=handle)


def test_a_wait_that_ends_gives_its_result(watched):
    assert watched.watch.run(lambda: "batch") == "batch"
    assert watched.balancer.parked == []


def test_a_server_that_died_in_a_wait_that_still_ended_is_found_at_its_end(watched):
    """verl's v1 path: its failed prompts counted as done, the rest generated on the server left, so the wait ended
    before any probe came round (a generation shorter than PROBE_S); the samples are not used."""
    watched.watch.probe_s = 60.0
    watched.dead.append(1)
    with pytest.raises(SharedRolloutError, match=r"replica 1 \(critic pool\) died"):
        watched.watch.run(lambda: "batch generated on replica 0 alone")
    assert watched.balancer.parked == [["server-1"]]


def test_a_generation_that_fails_on_a_dead_server_is_named_and_the_server_parked(watched):
    """verl's RayPPOTrainer path: the agent loop's gather raises Ray's error for the request on the dead server."""
    watched.dead.append(1)

    def generation():
        raise RuntimeError("ActorDiedError: the actor died unexpectedly before finishing this task")

    with pytest.raises(SharedRolloutError) as error:
        watched.watch.run(generation)
    message = str(error.value)
    assert "the rollout server of replica 1 (critic pool) died (Ray records its server's actor as dead)" in message
    assert "It is parked" in message and "resume from the last checkpoint" in message
    assert isinstance(error.value.__cause__, RuntimeError)  # Ray's error stays attached
    assert watched.balancer.parked == [["server-1"]]


def test_a_failure_with_every_server_alive_is_verls_own(watched):
    with pytest.raises(ValueError, match="a bug of its own"):
        watched.watch.run(lambda: (_ for _ in ()).throw(ValueError("a bug of its own")))
    assert watched.balancer.parked == []


def test_a_server_that_dies_while_the_wait_goes_on_stops_it(watched):
    """verl's v1 path: a failed prompt counts as done, so the wait itself never fails; the probe finds the server
    while the others still generate."""
    release = threading.Event()
    watched.dead.append(1)
    with pytest.raises(SharedRolloutError, match=r"replica 1 \(critic pool\) died"):
        watched.watch.run(release.wait)
    assert watched.balancer.parked == [["server-1"]]
    release.set()


def test_a_server_that_hangs_past_the_limit_stops_the_wait_naming_it(watched):
    release = threading.Event()
    watched.balancer.stalled_now = {"server-0": {"in_flight": 2, "idle_s": 31.0}}
    with pytest.raises(SharedRolloutError) as error:
        watched.watch.run(release.wait)
    assert (
        "replica 0 (actor pool) hangs: it has held 2 request(s) and ended none for 31 s "
        "(VERL_SPLIT_ROLLOUT_WATCHDOG_S=30)" in str(error.value)
    )
    assert watched.balancer.parked == [["server-0"]]
    release.set()


def test_no_limit_watches_for_dead_servers_only(watched):
    watched.watch.limit_s = 0.0  # VERL_SPLIT_ROLLOUT_WATCHDOG_S=0
    watched.balancer.stalled_now = {"server-0": {"in_flight": 2, "idle_s": 1e6}}
    assert watched.watch.check() is None
    watched.dead.append(0)
    assert "replica 0 (actor pool) died" in str(watched.watch.check())


def test_the_wrappers_call_verl_straight_without_a_watch_or_from_a_coroutine(watched, monkeypatch):
    monkeypatch.setattr(watchdog, "_watch", None)
    calls = []
    assert watchdog.wrap_sample(lambda *a, **k: calls.append((a, k)) or "sampled", None, (1,), {"b": 2}) == "sampled"
    monkeypatch.setattr(watchdog, "_watch", watched.watch)
    ran_on: list[str] = []

    def generate():
        ran_on.append(threading.current_thread().name)
        return "generated"

    assert watchdog.wrap_generate_sequences(lambda: generate(), None, (), {}) == "generated"
    assert ran_on == ["verl-split-generation"]  # watched: on a thread of its own

    async def awaited():  # verl's auto_await called from a coroutine hands the coroutine back: no thread
        return watchdog.wrap_generate_sequences(lambda: generate(), None, (), {})

    assert asyncio.run(awaited()) == "generated" and ran_on[-1] == "MainThread"


def test_a_timeout_inside_the_wait_is_the_waits_own_error_not_a_probe_tick(watched):
    """``concurrent.futures.TimeoutError`` is Python's ``TimeoutError``: one raised by the wait itself (a ``ray.get``
    with a timeout inside verl) must come out as it is, once, not be taken for the watch's own tick."""
    probes = []
    watched.watch.check = lambda hung=True: probes.append(hung)  # and finds nothing
    with pytest.raises(TimeoutError, match="verl's own"):
        watched.watch.run(lambda: (_ for _ in ()).throw(TimeoutError("verl's own")))
    assert probes == [False]
