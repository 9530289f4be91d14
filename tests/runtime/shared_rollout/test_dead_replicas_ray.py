"""The late join's wait for every critic rank on a real local Ray.

(Which rollout servers died is decided from Ray's actor table: test_watchdog_ray.py, on real actors.)
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(300)]

ray = pytest.importorskip("ray")


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
