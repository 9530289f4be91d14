"""verl-split's CPU checkpoint engine (verl_split/runtime/cpu/weight_transfer.py) through verl's protocol.

The calls ``CheckpointEngineManager.update_weights`` makes (``verl/checkpoint_engine/base.py``),
in its order, on engines made by verl's own ``CheckpointEngineRegistry``: prepare on every rank,
build_topology, init_process_group, send_weights on the actor ranks beside receive_weights on the
replicas' ranks, finalize. Real Ray (a local one-CPU instance) and real torch; the ranks are
engines in this process, as the mailbox between them is what is tested.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("the engine is for shared rollout, on verl 0.9", allow_module_level=True)

import ray  # noqa: E402
from verl.checkpoint_engine.base import CheckpointEngineRegistry  # noqa: E402

from verl_split.runtime.cpu import weight_transfer  # noqa: E402

pytestmark = [pytest.mark.subprocess, pytest.mark.ray]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def weights(n: int = 5, fail_after: int | None = None):
    for i in range(n):
        if fail_after is not None and i == fail_after:
            raise RuntimeError("the FSDP gather failed")
        yield f"layer{i}.weight", torch.full((10,), float(i))  # 40 bytes each


def engines(actor_ranks: int, replica_ranks: int, bucket_bytes: int):
    backend = CheckpointEngineRegistry.get(weight_transfer.BACKEND)
    assert backend is weight_transfer.ObjectStoreCheckpointEngine
    actors = [
        CheckpointEngineRegistry.new(weight_transfer.BACKEND, bucket_size=bucket_bytes, is_master=r == 0)
        for r in range(actor_ranks)
    ]
    replicas = [
        CheckpointEngineRegistry.new(weight_transfer.BACKEND, bucket_size=bucket_bytes) for _ in range(replica_ranks)
    ]
    metadata = [e.prepare() for e in actors + replicas]
    actor_kwargs, replica_kwargs = backend.build_topology(actor_ranks, replica_ranks, metadata)
    for rank, engine in enumerate(actors):
        engine.init_process_group(**{k: v[rank] for k, v in actor_kwargs.items()})
    for rank, engine in enumerate(replicas):
        engine.init_process_group(**{k: v[rank] for k, v in replica_kwargs.items()})
    return actors, replicas


async def receive(engine) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() async for name, tensor in engine.receive_weights(global_steps=1)}


def sync(actors, replicas, make_weights):
    async def run():
        return await asyncio.gather(
            *[a.send_weights(make_weights(), global_steps=1) for a in actors],
            *[receive(r) for r in replicas],
            return_exceptions=True,
        )

    return asyncio.run(run())


def test_every_replica_gets_every_tensor_in_buckets():
    actors, replicas = engines(actor_ranks=2, replica_ranks=2, bucket_bytes=100)  # 2 tensors a bucket
    results = sync(actors, replicas, weights)
    sent, received = results[: len(actors)], results[len(actors) :]
    assert sent == [{}, {}]  # the sender and the rank that only drains its generator
    for got in received:
        assert list(got) == [f"layer{i}.weight" for i in range(5)]
        for i in range(5):
            assert torch.equal(got[f"layer{i}.weight"], torch.full((10,), float(i)))
    for engine in actors + replicas:
        engine.finalize()
    assert all(e.sync_id is None for e in actors + replicas)


def test_a_sender_that_fails_reaches_the_receivers_instead_of_leaving_them_waiting():
    actors, replicas = engines(actor_ranks=1, replica_ranks=1, bucket_bytes=40)
    results = sync(actors, replicas, lambda: weights(fail_after=3))
    assert isinstance(results[0], RuntimeError) and "FSDP gather failed" in str(results[0])
    assert isinstance(results[1], Exception)
    assert "the actor failed to send its weights: RuntimeError: the FSDP gather failed" in str(results[1])
    for engine in actors + replicas:
        engine.finalize()


def test_two_syncs_do_not_mix():
    for step in (1, 2):
        actors, replicas = engines(actor_ranks=1, replica_ranks=1, bucket_bytes=1 << 20)
        results = sync(actors, replicas, lambda s=step: ((f"w{s}", torch.tensor([float(s)])),))
        assert list(results[1]) == [f"w{step}"]
        for engine in actors + replicas:
            engine.finalize()
