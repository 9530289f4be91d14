"""Where each pool's worker lands when Ray is told of two GPUs and the job shows it one (the one-GPU demo's layout).

    python -m verl_split.dryrun.gpu_probe [DEVICE]      # prints each pool's worker, then "same device: True"

A local Ray cluster with ``one_gpu.LOGICAL_GPUS`` logical GPUs and the one-GPU job's runtime_env
(``CUDA_VISIBLE_DEVICES=DEVICE``; default: the first GPU this shell's ``CUDA_VISIBLE_DEVICES`` names, else ``0``;
this process's own is set aside while Ray starts, as the demo does, or Ray would refuse two GPUs); the default
placement planned by verl-split (one pool a GPU) and its pools made as a run makes them
(``SplitResourcePoolManager``); in each, one worker of verl's own ``RayWorkerGroup`` reports what it sees:
``CUDA_VISIBLE_DEVICES``, Ray's GPU ids and, where torch sees a GPU, that GPU's name and UUID. On a GPU machine
both report the one GPU, by UUID; on a CPU the same Ray bookkeeping runs (``tests/dryrun/test_gpu_probe.py``) with
no device to name. Exit status 1 when the pools' workers do not see one and the same device.

Its Ray is set for a machine it may never have run on: a small object store (``OBJECT_STORE_BYTES``: Ray's default,
30 % of the memory, may not fit a small ``/dev/shm``, and the probe moves nothing) and the node on the loopback
address (``NODE_ADDRESS``: a machine with no routable interface gives Ray's address detection nothing to find).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

#: The probe's object store: ample for a few small calls, and small enough for any ``/dev/shm``.
OBJECT_STORE_BYTES = 1_000_000_000
#: A one-node cluster needs no other address than the loopback one.
NODE_ADDRESS = "127.0.0.1"


def _worker_class():
    import ray
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class DeviceWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def device(self) -> dict[str, Any]:
            import torch

            seen: dict[str, Any] = {
                "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "ray_gpu_ids": [str(i) for i in ray.get_gpu_ids()],
                "torch_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            }
            if seen["torch_devices"]:
                properties = torch.cuda.get_device_properties(0)
                seen.update(name=properties.name, uuid=str(getattr(properties, "uuid", "")))
            return seen

    return DeviceWorker


def probe(device: str = "0") -> dict[str, dict[str, Any]]:
    """Each pool's worker's view, by pool name (a local Ray started and shut down here)."""
    import ray
    from verl.single_controller.ray.base import RayClassWithInitArgs, RayWorkerGroup

    from verl_split.dryrun.one_gpu import LOGICAL_GPUS
    from verl_split.dryrun.recipe import ray_temp_dir
    from verl_split.placement import Cluster, plan_placement
    from verl_split.runtime.placement.pools import SplitResourcePoolManager

    plan = plan_placement("halves", Cluster(1, LOGICAL_GPUS))
    shown = os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # the raylet inherits it: one_gpu.environment
    ray.init(
        address="local",
        num_cpus=16,  # logical: verl asks for several CPUs a bundle (max_colocate_count)
        num_gpus=LOGICAL_GPUS,
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        _node_ip_address=NODE_ADDRESS,
        _temp_dir=ray_temp_dir(),
        runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": device}},
    )
    try:
        manager = SplitResourcePoolManager(resource_pool_spec=plan.resource_pool_spec, mapping={}, plan=plan)
        manager.create_resource_pool()
        worker = ray.remote(_worker_class())
        seen = {}
        for pool in plan.pools:
            group = RayWorkerGroup(
                resource_pool=manager.resource_pool_dict[pool.name],
                ray_cls_with_init=RayClassWithInitArgs(cls=worker),
                device_name="cuda",
            )
            (seen[pool.name],) = group.device()
        return seen
    finally:
        ray.shutdown()
        if shown is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = shown


def one_device(seen: dict[str, dict[str, Any]], device: str) -> bool:
    """Every pool's worker sees ``device`` alone, and, where torch names it, the same one."""
    shown = {view["CUDA_VISIBLE_DEVICES"] for view in seen.values()}
    uuids = {view.get("uuid") for view in seen.values()}
    return shown == {device} and len(uuids) == 1


def main(argv: list[str] | None = None) -> int:
    from verl_split.dryrun.one_gpu import visible_id

    device = next(iter(argv if argv is not None else sys.argv[1:]), None) or visible_id(os.environ)
    seen = probe(device)
    for pool, view in seen.items():
        print(f"{pool}: {json.dumps(view)}", flush=True)
    same = one_device(seen, device)
    print(f"same device: {same}", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
