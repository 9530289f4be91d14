"""Test-only verl 0.8 workers: the engine ``TrainingWorker`` as critic, without a model.

``SleepyTrainingWorker`` *is* verl's ``engine_workers.TrainingWorker``: the critic's
``train_mini_batch`` that runs is verl's own, with its ``register`` metadata (``blocking=False``),
its dispatch over the ``train`` mesh, its mini-batch loop and its metric collection. Only what
lies under it is replaced: the engine (one data-parallel rank, no model) and ``train_batch``,
the per-mini-batch engine step, which sleeps and returns a loss. The actor is a plain verl
``Worker`` whose ``update_actor`` is registered as ``engine_workers.ActorRolloutRefWorker``'s
and sleeps as long. Sleeping and logging: ``stand_ins.py``. Workers import this module by
reference, so it must be on their ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib

import torch
from stand_ins import SleepyActorBase, Stub, registered_like, sleeping_update
from tensordict import TensorDict
from verl.single_controller.base import Worker
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker


def _metrics(**values: float) -> TensorDict:
    # What the engine workers return: a TensorDict with the metrics as non-tensor data;
    # the trainer renames them and turns "mfu" into perf/mfu/<role>.
    return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {**values, "mfu": 0.0}})


class SleepyTrainingWorker(TrainingWorker):
    def __init__(self):  # noqa: D107 -- no model: only what train_mini_batch touches
        Worker.__init__(self)
        # train_mini_batch all-gathers the token counts over the data-parallel group; with one
        # rank a gloo group on an in-memory store is enough (no GPU, no port).
        torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
        self.engine = Stub(
            train_mode=lambda **_: contextlib.nullcontext(),
            get_data_parallel_size=lambda: 1,
            get_data_parallel_rank=lambda: 0,
            get_data_parallel_group=lambda: None,  # the default group: this rank alone
            is_mp_src_rank_with_outputs=lambda: True,
        )
        self._register_dispatch_collect_info("train", dp_rank=0, is_collect=True)

    # Unregistered on purpose: train_mini_batch calls it in-process once per mini-batch, and
    # the worker group needs no remote train_batch.
    def train_batch(self, data: TensorDict) -> TensorDict:
        with sleeping_update("critic"):
            return _metrics(loss=0.5)


class SleepyActor(SleepyActorBase):
    @registered_like(ActorRolloutRefWorker.update_actor)
    def update_actor(self, data: TensorDict) -> TensorDict:
        with sleeping_update("actor"):
            return _metrics(pg_loss=0.25)
