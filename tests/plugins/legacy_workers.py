"""Test-only verl 0.7 workers: the legacy ``fsdp_workers.CriticWorker`` without a model.

``SleepyCritic`` *is* verl's legacy ``CriticWorker`` (its ``update_critic``, its ``register``
metadata, its dispatch over the ``critic`` mesh) with the model parts replaced by stand-ins:
the inner ``critic.update_critic`` sleeps ``LEGACY_SLEEP`` seconds and returns a loss. The
actor is a plain verl ``Worker`` whose blocking ``update_actor`` sleeps as long. Both log
(role, start, end) as the worker process saw it to ``LEGACY_LOG``. Workers import this
module by reference, so it must be on their ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import make_nd_compute_dataproto_dispatch_fn, register
from verl.workers.fsdp_workers import CriticWorker


def _log(role: str, start: float) -> None:
    with open(os.environ["LEGACY_LOG"], "a") as f:
        f.write(json.dumps({"role": role, "pid": os.getpid(), "start": start, "end": time.time()}) + "\n")


class _Stub:
    def __init__(self, **methods):
        for name, value in methods.items():
            setattr(self, name, value)


class _SleepyInnerCritic:
    def update_critic(self, data):
        start = time.time()
        time.sleep(float(os.environ.get("LEGACY_SLEEP", "1")))
        _log("critic", start)
        return {"critic/vf_loss": 0.5}


class SleepyCritic(CriticWorker):
    def __init__(self):  # noqa: D107 -- no model: only what update_critic touches
        Worker.__init__(self)
        self._register_dispatch_collect_info("critic", dp_rank=self.rank, is_collect=True)
        self._is_offload_param = self._is_offload_optimizer = False
        self.ulysses_sharding_manager = contextlib.nullcontext()
        self.critic = _SleepyInnerCritic()
        self.flops_counter = _Stub(estimate_flops=lambda tokens, seconds: (0.0, 1.0))
        self.critic_lr_scheduler = _Stub(get_last_lr=lambda: [1e-3], step=lambda: None)
        self.config = _Stub(ppo_epochs=1)


class SleepyActor(Worker):
    def __init__(self):  # noqa: D107
        super().__init__()
        self._register_dispatch_collect_info("actor", dp_rank=self.rank, is_collect=True)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def update_actor(self, data: DataProto):
        start = time.time()
        time.sleep(float(os.environ.get("LEGACY_SLEEP", "1")))
        _log("actor", start)
        return DataProto(batch=None, meta_info={"metrics": {"actor/pg_loss": 0.25}})
