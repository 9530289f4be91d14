"""The generation watchdog and the balancer's control calls on a real local Ray (CPU).

The rollout servers are stand-ins (``benchmarks/held_servers.py``): verl's need vLLM or SGLang, and what the
watchdog depends on is only the server's Ray actor (its slots, its state in Ray's actor table, its
``abort_all_requests``). Each is an async actor whose ``generate`` waits on a gate the test opens, so a server is
held at its ``max_concurrency`` for exactly as long as the test says, not for a number of seconds. The balancer is
verl-split's own, started as a run starts it (``balancer.actor_class``), except where a test wedges it on purpose.
Nothing here bounds a wall-clock time; the file's timeout is a guard against a hang.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("shared rollout is built on verl 0.9's load balancer and managers", allow_module_level=True)

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(300)]

ray = pytest.importorskip("ray")

from verl_split.runtime.shared_rollout import liveness, watchdog  # noqa: E402
from verl_split.runtime.shared_rollout.balancer import actor_class  # noqa: E402
from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError  # noqa: E402

SLOTS = 4


def start_servers(held_servers, count: int) -> tuple:
    return held_servers.start_held_servers(count, slots=SLOTS, waiting=1000)


def manager_of(held_servers, servers: list, balancer):
    """Replica 0 on the actor pool, the rest on the critic pool."""
    return held_servers.watched_manager(servers, balancer, actor_pool=1)


def start_balancer(held_servers, servers: list, **options):
    return actor_class().options(**options).remote(servers=held_servers.by_address(servers))


class CountedWatch(watchdog.Watch):
    """A watch that says when it has looked at the servers ``wanted`` times (and found nothing)."""

    def __init__(self, *args, wanted: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.looked = 0
        self.wanted = wanted
        self.enough = threading.Event()

    def check(self, hung: bool = True):
        found = super().check(hung)
        self.looked += 1
        if self.looked >= self.wanted:
            self.enough.set()
        return found


def test_a_server_held_at_its_max_concurrency_is_not_reported_and_the_generation_goes_on(held_servers):
    gate, (busy,) = start_servers(held_servers, 1)
    balancer = start_balancer(held_servers, [busy])
    requests = [busy.generate.remote(i) for i in range(2 * SLOTS)]  # every slot taken, as many queued behind
    # What the watch used to send: Ray's no-op queues behind the held requests and gets no answer (a deadline
    # that cannot pass: the requests wait on the closed gate), so it read this healthy server as died.
    answered, _ = ray.wait([busy.__ray_ready__.remote()], timeout=2.0)
    assert answered == []
    assert liveness.actor_state(busy) == "ALIVE"  # what it reads now

    watch = CountedWatch(manager_of(held_servers, [busy], balancer), limit_s=3600.0, probe_s=0.05, wanted=5)

    def generation() -> list[int]:
        watch.enough.wait()  # the watch has looked five times at the server held at its slots
        ray.get(gate.open.remote())
        return ray.get(requests)

    assert watch.run(generation) == list(range(2 * SLOTS))
    assert watch.looked >= 5
    assert ray.get(busy.aborted.remote()) == []  # nothing stopped, nothing aborted
    ray.kill(balancer)


def test_a_server_killed_for_real_is_reported_named_parked_and_the_others_abort(held_servers):
    gate, (alive, killed) = start_servers(held_servers, 2)
    balancer = start_balancer(held_servers, [alive, killed])
    held = [alive.generate.remote(i) for i in range(SLOTS)]
    ray.kill(killed)
    never = threading.Event()
    watch = watchdog.Watch(
        manager_of(held_servers, [alive, killed], balancer), limit_s=3600.0, probe_s=0.05, abort_timeout_s=0.5
    )
    with pytest.raises(SharedRolloutError) as error:
        watch.run(never.wait)
    message = str(error.value)
    assert "replica 1 (critic pool) died (Ray records its server's actor as dead)" in message
    assert "replica 0" not in message and "It is parked" in message
    # The live server was asked to abort its requests and reject new ones (verl's vLLM server's signature). With
    # every slot of its actor taken the ask waits for one, as it would on a real server: the watch gave up waiting
    # for the answer (abort_timeout_s, logged) and the run stopped all the same; the ask lands once a slot frees.
    ray.get(gate.open.remote())
    ray.get(held)
    assert ray.get(alive.aborted.remote()) == [True]
    # Parked: a request routed now goes to the live server, never to the dead one.
    assert ray.get(balancer.acquire_server.remote(request_id="after"))[0] == "s0"
    never.set()
    ray.kill(balancer)


@ray.remote(num_cpus=0)
class WedgedBalancer:
    """A balancer whose calls never return (a wedged event loop, as the watch sees it)."""

    def __init__(self) -> None:
        self._never = asyncio.Event()

    async def stalled(self, limit_s: float) -> dict:
        await self._never.wait()
        return {}

    async def park_dead(self, servers: list[str]) -> None:
        await self._never.wait()


def test_a_wedged_balancer_stops_the_run_naming_it_and_so_does_a_dead_one(held_servers):
    gate, (server,) = start_servers(held_servers, 1)
    wedged = WedgedBalancer.options(max_concurrency=10).remote()
    ray.get(wedged.__ray_ready__.remote())
    never = threading.Event()
    watch = watchdog.Watch(
        manager_of(held_servers, [server], wedged), limit_s=3600.0, probe_s=0.05, balancer_timeout_s=0.5
    )
    with pytest.raises(SharedRolloutError, match=r"the load balancer did not answer .* within 0\.5 s: it is wedged"):
        watch.run(never.wait)
    assert ray.get(server.aborted.remote()) == [True]  # the run stops: the servers' requests are aborted
    ray.kill(wedged)
    with pytest.raises(SharedRolloutError, match=r"the load balancer died \((ActorDiedError|RayActorError)\)"):
        watch.run(never.wait)
    never.set()


def test_the_balancers_control_calls_answer_while_every_request_slot_is_taken(held_servers):
    """Every request slot of the balancer taken by acquires that wait (all servers parked), as many again queued in
    Ray behind them: the late join's decision (``progress``) and opening (``open``) still answer, from the control
    group, and the opening hands the waiting acquires their server across the two threads."""
    _, servers = start_servers(held_servers, 2)
    balancer = start_balancer(held_servers, servers, max_concurrency=SLOTS)
    ray.get(balancer.gate.remote(parked=["s0", "s1"], caps={}))
    acquires = [balancer.acquire_server.remote(request_id=f"r{i}") for i in range(2 * SLOTS)]
    # The default group is full: an ordinary call waits behind the acquires (here, until the opening below).
    ready = balancer.__ray_ready__.remote()
    assert ray.wait([ready], timeout=2.0)[0] == []
    # verl's balancer counts a waiting acquire nowhere; verl-split's queue holds the ones that hold a slot.
    progress = ray.get(balancer.progress.remote())
    assert progress["queued"] == SLOTS and progress["routed"] == 0
    ray.get(balancer.open.remote(["s1"]))
    assert {server for server, _ in ray.get(acquires)} == {"s1"}
    ray.get(ready)
    assert ray.get(balancer.take_step.remote())["routed"] == {"s1": 2 * SLOTS}
    ray.kill(balancer)
