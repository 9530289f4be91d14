"""A checkpoint engine for the CPU dry run: verl's weight-transfer protocol over Ray's object store.

verl moves the actor's weights to rollout replicas on *other* GPUs through a checkpoint engine
(``verl/checkpoint_engine/base.py``: ``CheckpointEngineManager.update_weights`` calls ``prepare``,
``build_topology``, ``init_process_group``, then ``send_weights`` on every actor rank beside
``receive_weights`` on every replica's ``CheckpointEngineWorker``, then ``finalize``). Every engine
verl ships needs a GPU (NCCL/NIXL import cupy) or an extra package, so a CPU install has only
``naive``, which works inside one process. This engine runs the same protocol on the CPU, so the
dry run exercises shared rollout's whole weight push; on GPUs verl's ``nccl`` engine does the job.

How it moves the weights: actor rank 0 packs the tensors into buckets of at most
``update_weights_bucket_megabytes``, ``ray.put`` s each bucket and posts its reference to a
mailbox actor; every receiver takes the references in order and reads the buckets from the
object store (shared memory on one node). The other actor ranks only drain their generator,
which they must: FSDP gathers each full tensor collectively.

It registers under :data:`BACKEND` in verl's ``CheckpointEngineRegistry`` when imported; verl
imports it in each process that needs it through ``checkpoint_engine.custom_backend_module``,
verl's own hook for engines outside verl.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

#: ``actor_rollout_ref.rollout.checkpoint_engine.backend`` for this engine.
BACKEND = "verl_split_cpu"
#: ``checkpoint_engine.custom_backend_module``: the module verl imports to find it.
MODULE = __name__
MAILBOX_NAME = "verl_split_weight_mailbox"

SENDER, DRAIN, RECEIVER = "sender", "drain", "receiver"


class WeightMailbox:
    """Ray actor between the sender and the receivers of one weight sync at a time.

    Holds each sync's bucket references in order until the sender finalizes the sync. A
    receiver asking for a bucket not yet posted waits for it; an error posted by the sender
    (its weight generator failed) reaches every receiver instead of leaving them waiting.
    """

    def __init__(self) -> None:
        self._buckets: dict[str, list[Any]] = {}
        self._end: dict[str, str | None] = {}  # sync id -> None (complete) or the sender's error
        self._changed = asyncio.Condition()

    async def post(self, sync_id: str, refs: list[Any]) -> None:
        async with self._changed:
            self._buckets.setdefault(sync_id, []).extend(refs)
            self._changed.notify_all()

    async def close(self, sync_id: str, error: str | None = None) -> None:
        async with self._changed:
            self._buckets.setdefault(sync_id, [])
            self._end[sync_id] = error
            self._changed.notify_all()

    async def take(self, sync_id: str, index: int) -> list[Any]:
        """``[ref]`` of bucket ``index`` of a sync, or ``[]`` once the sync has no more buckets."""
        async with self._changed:
            while True:
                buckets = self._buckets.get(sync_id, [])
                if index < len(buckets):
                    return [buckets[index]]  # in a list, so that Ray hands over the reference, not the bucket
                if sync_id in self._end:
                    if self._end[sync_id] is not None:
                        raise RuntimeError(f"the actor failed to send its weights: {self._end[sync_id]}")
                    return []
                await self._changed.wait()

    def drop(self, sync_id: str) -> None:
        self._buckets.pop(sync_id, None)
        self._end.pop(sync_id, None)


_handle: Any = None


def _mailbox() -> Any:
    """The job's mailbox: created by the first process that asks for it, found by name afterwards."""
    global _handle
    if _handle is None:
        _handle = (
            ray.remote(WeightMailbox)
            .options(name=MAILBOX_NAME, get_if_exists=True, num_cpus=0, max_concurrency=1000)
            .remote()
        )
    return _handle


def mailbox_ready() -> Any:
    """A reference that resolves once the job's mailbox actor runs (started now if it is not yet)."""
    return _mailbox().__ray_ready__.remote()


class ObjectStoreCheckpointEngine(CheckpointEngine):
    """verl's checkpoint-engine interface over Ray's object store (CPU dry run; see the module doc)."""

    def __init__(self, bucket_size: int, is_master: bool = False, **kwargs: Any) -> None:
        self.bucket_size = max(int(bucket_size), 1)
        self.is_master = is_master
        self.role: str | None = None
        self.sync_id: str | None = None

    def prepare(self) -> dict[str, Any]:
        return {"is_master": self.is_master}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        # One sender, the actor rank verl made master (rank 0, engine_workers.py init_model): every rank
        # holds every full tensor after the FSDP gathers. A fresh id per sync keeps two syncs' buckets apart.
        masters = [rank for rank in range(actor_wg_world_size) if metadata[rank].get("is_master")]
        sender = masters[0] if masters else 0
        sync_id = uuid.uuid4().hex
        _mailbox()  # in the trainer's process, before any worker asks for it by name
        actor = {
            "role": [SENDER if rank == sender else DRAIN for rank in range(actor_wg_world_size)],
            "sync_id": [sync_id] * actor_wg_world_size,
        }
        rollout = {"role": [RECEIVER] * rollout_world_size, "sync_id": [sync_id] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, role: str, sync_id: str) -> None:
        self.role, self.sync_id = role, sync_id

    def finalize(self) -> None:
        if self.role == SENDER and self.sync_id is not None:
            _mailbox().drop.remote(self.sync_id)
        self.role, self.sync_id = None, None

    async def send_weights(self, weights: Any, global_steps: int | None = None) -> dict[str, float]:
        if self.role != SENDER:
            async for _ in ensure_async_iterator(weights):
                pass
            return {}
        mailbox = _mailbox()
        try:
            bucket: dict[str, torch.Tensor] = {}
            size = 0
            async for name, tensor in ensure_async_iterator(weights):
                # A copy: the tensor may alias a training parameter that the next update changes.
                tensor = tensor.detach().to("cpu", copy=True)
                if bucket and size + tensor.nbytes > self.bucket_size:
                    await mailbox.post.remote(self.sync_id, [ray.put(bucket)])
                    bucket, size = {}, 0
                bucket[name] = tensor
                size += tensor.nbytes
            if bucket:
                await mailbox.post.remote(self.sync_id, [ray.put(bucket)])
        except BaseException as exc:
            await mailbox.close.remote(self.sync_id, f"{type(exc).__name__}: {exc}")
            raise
        await mailbox.close.remote(self.sync_id)
        return {}

    async def receive_weights(self, global_steps: int | None = None):
        mailbox = _mailbox()
        index = 0
        while True:
            refs = await mailbox.take.remote(self.sync_id, index)
            if not refs:
                return
            bucket = await refs[0]
            for name, tensor in bucket.items():
                yield name, tensor
            index += 1


CheckpointEngineRegistry.register(BACKEND)(ObjectStoreCheckpointEngine)
