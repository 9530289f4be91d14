"""Two of verl's worker groups started at once on a real Ray node, the seam's first port held by another socket.

Each group's rank 0 binds its ``MASTER_PORT`` with torch's ``TCPStore``, as verl's workers do when they set up
``torch.distributed``; both groups get their ports before either binds, the window in which verl's own pick
(port 0, from the ephemeral range) can be taken.
"""

from __future__ import annotations

import socket

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(300)]

ray = pytest.importorskip("ray")


def store_worker_class():
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class StoreWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def bind_store(self):
            import os

            from torch.distributed import TCPStore

            port = int(os.environ["MASTER_PORT"])
            self.store = TCPStore("127.0.0.1", port, world_size=1, is_master=True, wait_for_workers=False)
            return port

    return StoreWorker


def test_a_taken_first_port_is_skipped_and_both_groups_bind_their_own():
    import verl.single_controller.ray.base as verl_ray
    from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    from verl_split.plugin.seam import Undo
    from verl_split.runtime.placement import ports

    undo = Undo()
    ports.install(verl_ray, undo)
    cursor = ports.cursor()
    if cursor is None:
        pytest.skip(f"this machine's ephemeral range {ports.ephemeral_range()} leaves no room outside it")
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONWARNINGS": "ignore"}})
    try:
        first = cursor.next_port
        with socket.socket() as other:
            other.bind(("", first))
            other.listen()
            worker = ray.remote(store_worker_class())
            groups = [
                RayWorkerGroup(
                    resource_pool=RayResourcePool([1], use_gpu=False, name_prefix=name, max_colocate_count=1),
                    ray_cls_with_init=RayClassWithInitArgs(cls=worker),
                    device_name="cpu",
                )
                for name in ("actor", "critic")
            ]
            bound = [group.bind_store()[0] for group in groups]
        low, high = ports.ephemeral_range()
        assert bound == [int(g._master_port) for g in groups]
        assert first < bound[0] < bound[1] and not any(low <= port <= high for port in bound)
    finally:
        ray.shutdown()
        undo.run()
