"""``both_pools.dead_replicas`` on a real local Ray: servers that never answer cost one timeout in all.

The replicas are stand-ins (verl's rollout replicas need vLLM/SGLang servers, which have no CPU path), but
their servers are real Ray actors: one busy in a long call, so its ``__ray_ready__`` queues behind it and
never answers in time (what a hung server looks like), one killed, one healthy. Probed one after the other
with 2 s timeouts, the six replicas on the busy server would take 12 s.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(300)]

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": {"PYTHONWARNINGS": "ignore"}})
    try:
        yield
    finally:
        ray.shutdown()


def test_hung_and_dead_servers_are_found_in_one_timeout(local_ray):
    from verl_split.runtime.shared_rollout.both_pools import dead_replicas

    @ray.remote(num_cpus=0)
    class Server:
        def hold(self, seconds: float) -> None:
            time.sleep(seconds)

        def ping(self) -> int:
            return 1

    busy, dead, healthy = Server.remote(), Server.remote(), Server.remote()
    ray.get([s.ping.remote() for s in (busy, dead, healthy)], timeout=60)
    ray.kill(dead)
    busy.hold.remote(60)  # every later call to it, __ray_ready__ included, waits behind this one
    time.sleep(0.5)
    servers = [[busy]] * 6 + [[dead], [healthy, healthy]]
    replicas = [SimpleNamespace(replica_rank=rank, servers=s) for rank, s in enumerate(servers)]
    timeout = 2.0
    try:
        started = time.monotonic()
        found = dead_replicas(replicas, timeout)
        took = time.monotonic() - started
    finally:
        ray.kill(busy)
    assert found == [0, 1, 2, 3, 4, 5, 6]
    assert timeout <= took < 2 * timeout, took  # one deadline for all, not 6 x 2 s


def test_the_late_join_waits_for_a_critic_rank_verl_does_not_collect_from(local_ray):
    """verl's update future completes when the collected rank returns; the late join wakes the critic pool only
    after every rank's update (``late_join.every_rank_done``), here a non-collected rank made 1 s slower.

    The two ranks are stand-ins for verl's critic workers (synchronous Ray actors, as ``TrainingWorker`` is);
    the update is a sleep, the collect rule verl's: only rank 0's result is waited for.
    """
    import concurrent.futures

    from verl_split.runtime.shared_rollout.late_join import LateJoin, every_rank_done

    @ray.remote(num_cpus=0)
    class CriticRank:
        def update(self, seconds: float) -> float:
            time.sleep(seconds)
            return time.time()

    ranks = [CriticRank.remote() for _ in range(2)]
    ray.get([rank.__ray_ready__.remote() for rank in ranks])
    ends = [rank.update.remote(seconds) for rank, seconds in zip(ranks, (0.2, 1.2), strict=True)]
    collected: concurrent.futures.Future = concurrent.futures.Future()
    collected.set_result(ray.get(ends[0]))  # what verl's future gives: rank 0 is done, rank 1 still updates
    woken = []
    push, open_servers = lambda: woken.append(time.time()), lambda: None
    late = LateJoin(collected, push, open_servers, 3, ranks_done=lambda: every_rank_done(ranks))
    late.start()
    late._done.wait(30)
    assert woken and woken[0] >= ray.get(ends[1])  # not before the slow rank's update ended
