"""The CPU rollout's forced tail (``hold.py``) and long-tailed lengths (``lengths.py``), without Ray."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from verl_split.runtime.cpu.hold import HeldRequests
from verl_split.runtime.cpu.lengths import PUBLISHED_MU, PUBLISHED_SIGMA, long_tail_cap

pytestmark = pytest.mark.unit


def test_held_requests_answer_the_first_n_then_wait_for_release():
    async def scenario():
        gate = HeldRequests()
        await asyncio.wait_for(gate.admit(), 1)  # not armed: everything passes
        gate.arm(2)
        done: list[int] = []

        async def request(i):
            await gate.admit()
            done.append(i)

        tasks = [asyncio.create_task(request(i)) for i in range(5)]
        for _ in range(10):
            await asyncio.sleep(0)
        assert done == [0, 1]  # the rest are held, whatever the time
        assert gate.release() == 2
        await asyncio.gather(*tasks)
        assert sorted(done) == [0, 1, 2, 3, 4]
        gate.arm(1)  # the next step holds again
        first = asyncio.create_task(request(5))
        second = asyncio.create_task(request(6))
        for _ in range(10):
            await asyncio.sleep(0)
        assert done[-1] == 5 and not second.done()
        gate.release()
        await asyncio.gather(first, second)

    asyncio.run(scenario())


def test_long_tail_caps_are_the_benchmarks_fit_and_seeded_by_the_prompt():
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from control_plane_model import PUBLISHED_LENGTHS

    fitted = (PUBLISHED_LENGTHS.mu, PUBLISHED_LENGTHS.sigma)
    assert pytest.approx(fitted) == (PUBLISHED_MU, PUBLISHED_SIGMA)
    prompts = [[7, i, i * 3 % 11] for i in range(400)]
    caps = [long_tail_cap(p, 64) for p in prompts]
    assert caps == [long_tail_cap(p, 64) for p in prompts]  # the same in every run
    assert all(1 <= c <= 64 for c in caps)
    caps.sort()
    assert caps[-1] > 2 * caps[len(caps) // 2]  # a tail: the longest well past the median
