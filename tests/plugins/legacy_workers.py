"""Test-only verl 0.7 workers: the legacy ``fsdp_workers.CriticWorker`` without a model.

``SleepyCritic`` *is* verl's legacy ``CriticWorker`` (its ``update_critic``, its ``register``
metadata, its dispatch over the ``critic`` mesh) with the model parts replaced by stand-ins:
the inner ``critic.update_critic`` sleeps and returns a loss. The actor is a plain verl
``Worker`` whose ``update_actor`` is registered as the legacy actor's and sleeps as long.
Sleeping and logging: ``stand_ins.py``. Workers import this module by reference, so it must
be on their ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib

from stand_ins import SleepyActorBase, Stub, registered_like, sleeping_update
from verl import DataProto
from verl.single_controller.base import Worker
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker


class _SleepyInnerCritic:
    def update_critic(self, data):
        with sleeping_update("critic"):
            return {"critic/vf_loss": 0.5}


class SleepyCritic(CriticWorker):
    def __init__(self):  # noqa: D107 -- no model: only what update_critic touches
        Worker.__init__(self)
        self._register_dispatch_collect_info("critic", dp_rank=self.rank, is_collect=True)
        self._is_offload_param = self._is_offload_optimizer = False
        self.ulysses_sharding_manager = contextlib.nullcontext()
        self.critic = _SleepyInnerCritic()
        self.flops_counter = Stub(estimate_flops=lambda tokens, seconds: (0.0, 1.0))
        self.critic_lr_scheduler = Stub(get_last_lr=lambda: [1e-3], step=lambda: None)
        self.config = Stub(ppo_epochs=1)


class SleepyActor(SleepyActorBase):
    @registered_like(ActorRolloutRefWorker.update_actor)
    def update_actor(self, data: DataProto):
        # The legacy actor's result: a DataProto whose meta_info carries the metrics.
        with sleeping_update("actor"):
            return DataProto(batch=None, meta_info={"metrics": {"actor/pg_loss": 0.25}})
