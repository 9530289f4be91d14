"""The balancer's hand-out across its two threads (verl_split/runtime/shared_rollout/balancer.py).

On Ray the control calls run on the control group's own thread and loop; here the request loop is an asyncio loop
the test steps by hand and the control call runs on another (``asyncio.run``), so the slot a control call hands
out must reach its acquire through the request loop, and one whose client gave up meanwhile must go to the next.
The same on a real Ray actor, every request slot taken: test_watchdog_ray.py.
"""

from __future__ import annotations

import asyncio

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("shared rollout is built on verl 0.9's load balancer and managers", allow_module_level=True)

from verl_split.runtime.shared_rollout.balancer import SharedRolloutBalancer  # noqa: E402

pytestmark = pytest.mark.unit


def waiting(loop: asyncio.AbstractEventLoop, balancer: SharedRolloutBalancer, count: int) -> list[asyncio.Task]:
    """``count`` acquires started on ``loop``, stepped until each waits in the balancer's queue."""
    tasks = [loop.create_task(balancer.acquire_server(request_id=f"r{i}")) for i in range(count)]
    while len(balancer._waiting) < count:
        loop.run_until_complete(asyncio.sleep(0))
    return tasks


def test_a_slot_handed_out_from_another_loop_reaches_its_acquire_on_the_request_loop():
    loop = asyncio.new_event_loop()
    try:
        balancer = SharedRolloutBalancer(servers={"h": "handle-h", "c": "handle-c"})
        balancer.gate(parked=["h", "c"], caps={})
        tasks = waiting(loop, balancer, 2)
        asyncio.run(balancer.open(["c"]))  # the control group's loop, not the one the acquires wait on
        assert not any(task.done() for task in tasks)  # delivered through the request loop only
        loop.run_until_complete(asyncio.gather(*tasks))
        assert [task.result() for task in tasks] == [("c", "handle-c")] * 2
        assert balancer._inflight_requests == {"h": 0, "c": 2}
    finally:
        loop.close()


def test_a_slot_whose_client_gave_up_before_it_arrived_goes_to_the_next_in_the_queue():
    loop = asyncio.new_event_loop()
    try:
        balancer = SharedRolloutBalancer(servers={"h": "handle-h", "c": "handle-c"})
        balancer.gate(parked=["c"], caps={"h": 0, "c": 1})  # h has no room; c, once open, one
        first, second = waiting(loop, balancer, 2)
        handed = balancer._waiting.peek()[1]
        asyncio.run(balancer.open(["c"]))  # hands c's one slot to the first, on its way to the request loop
        handed.cancel()  # its client gave up before the slot arrived
        loop.run_until_complete(second)
        assert second.result() == ("c", "handle-c")
        assert first.cancelled() or first.done()
        assert balancer._inflight_requests == {"h": 0, "c": 1}  # the given-up slot was given back, not lost
        assert not balancer._waiting
    finally:
        loop.close()
