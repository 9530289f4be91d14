"""A CPU rollout for verl: Hugging Face ``generate`` behind verl's rollout interfaces.

This is a stand-in for vLLM/SGLang, for dry runs and tests on machines without a GPU:
slow, one request at a time, no KV-cache management. It plugs into verl's two rollout
registries, as the vLLM and SGLang backends do:

- trainer side, ``RolloutReplicaRegistry`` (``verl/workers/rollout/replica.py``):
  :class:`CPURolloutReplica` launches one ``server.CPUGenerationServer`` Ray actor per
  replica; verl's agent loop calls its ``generate`` with token ids and gets token ids
  and their log-probs back.
- worker side, ``_ROLLOUT_REGISTRY`` (``verl/workers/rollout/base.py``):
  :class:`CPURolloutAdapter` lives in the hybrid actor worker and, on every weight sync,
  receives the actor's full weights from verl and pushes them into its replica's
  server, so the rollout policy follows training step by step.

Select it with ``actor_rollout_ref.rollout.name=cpu_hf``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

from verl_split.core import compat
from verl_split.runtime.cpu.names import server_name
from verl_split.runtime.cpu.server import CPUGenerationServer

#: The ``actor_rollout_ref.rollout.name`` that selects this rollout.
ROLLOUT_NAME = "cpu_hf"
#: Import path of the worker-side class, for verl's ``_ROLLOUT_REGISTRY``.
ADAPTER_FQN = "verl_split.runtime.cpu.rollout.CPURolloutAdapter"


def _rollout_world_size(config: Any) -> int:
    return config.tensor_model_parallel_size * config.data_parallel_size * config.pipeline_model_parallel_size


#: Ray's default max_concurrency for an async actor (what verl 0.7.1's replica falls back to as well).
_RAY_ASYNC_MAX_CONCURRENCY = 1000


class CPURolloutReplica(RolloutReplica):
    """Trainer-side replica: one :class:`CPUGenerationServer` actor, no GPU of its own.

    In verl's hybrid mode the replica's logical GPU belongs to the actor worker that
    also trains; the server only holds a CPU copy of the weights the worker sends it.
    """

    async def launch_servers(self) -> None:
        # verl 0.8 added name_suffix (reward/teacher replicas beside the policy's); 0.7 has none.
        suffix = compat.replica_name_suffix(self)
        server_cls = ray.remote(CPUGenerationServer)
        server = server_cls.options(
            name=server_name(self.replica_rank) + suffix,
            num_cpus=0,  # the logical CPUs belong to the training workers; this one idles between steps
            # verl 0.7.1+ sizes it (RolloutReplica.max_concurrency: at least 1000, more with max_num_seqs); 0.7.0
            # has no such property: Ray's own default for async actors.
            max_concurrency=compat.replica_max_concurrency(self, _RAY_ASYNC_MAX_CONCURRENCY),
        ).remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        await server.weight_info.remote()  # fail here, not at the first request, if it cannot start
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"cpu-rollout-{self.replica_rank}{suffix}"

    def rollout_worker_use_gpu(self) -> bool:
        return False

    def get_ray_class_with_init_args(self):
        # verl 0.7.0 declares it abstract (verl/workers/rollout/replica.py), so a replica class must name it;
        # 0.7.1+ builds verl's CheckpointEngineWorker there, which shared rollout's colocated
        # replicas use. Only colocated and standalone replicas call it: the CPU dry run on 0.7 is hybrid.
        return super().get_ray_class_with_init_args()


class CPURolloutAdapter(BaseRollout):
    """Worker-side rollout inside verl's hybrid actor worker.

    verl hands it the actor's full weights on every sync (``update_weights`` with
    ``checkpoint_engine.backend=naive``); every rank must drain the generator (it
    gathers FSDP shards collectively), and the first rank of each replica sends the
    tensors to its replica's server.
    """

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        size = _rollout_world_size(self.config)
        if "replica_rank" in kwargs:
            # In a CheckpointEngineWorker (a replica on other GPUs than the actor's, e.g. shared
            # rollout): verl passes the replica's rank (verl/workers/rollout/replica.py
            # get_ray_class_with_init_args) and creates this adapter before torch.distributed,
            # so the rank inside the replica comes from the worker group's RANK.
            self.replica_rank = int(kwargs["replica_rank"])
            rank = int(os.environ.get("RANK", "0"))
        else:
            # In the hybrid actor worker: replicas are consecutive slices of the actor's ranks.
            rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            self.replica_rank = rank // size
        self.is_leader = rank % size == 0
        self._server: Any = None

    @property
    def is_leader_rank(self) -> bool:
        """What verl's CheckpointEngineWorker asks its adapter (``is_leader_rank``)."""
        return self.is_leader

    async def resume(self, tags: list[str]) -> None:
        pass

    async def release(self) -> None:
        pass

    async def update_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]], wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the CPU rollout takes full named tensors, not {wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("the CPU rollout does not take LoRA adapters; set model.lora.merge=true")
        # Copy: the tensors may alias the training parameters, which the next update changes.
        # The hybrid worker hands over a generator; a checkpoint engine's receive_weights is async.
        if hasattr(weights, "__aiter__"):
            state = {name: tensor.detach().to("cpu", copy=True) async for name, tensor in weights}
        else:
            state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        if not self.is_leader:
            return
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        await self._server.update_weights.remote(state, global_steps=kwargs.get("global_steps"))
