"""What the stand-in worker tests share: a timed sleep, register metadata borrowed from verl,
and a ``RayPPOTrainer`` that owns real worker groups but was never set up for ``fit``.

Used by ``legacy_workers.py`` (verl 0.7) and ``engine_workers_stand_in.py`` (verl 0.8), and
by the scripts of ``tests/e2e/test_overlap_*_workers.py``, which run in a fresh interpreter
with this folder on ``PYTHONPATH`` (Ray workers import the worker classes by reference).

Environment:
- ``STAND_IN_LOG``: JSON-lines file; each update appends (role, pid, start, end) as its
  worker process saw them, so overlap is measured independently of verl-split's timers.
- ``STAND_IN_SLEEP``: seconds each update sleeps (default 1).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import MAGIC_ATTR, register


@contextlib.contextmanager
def sleeping_update(role: str) -> Iterator[None]:
    """Stand in for the model work of one update: sleep, then log the interval."""
    start = time.time()
    time.sleep(float(os.environ.get("STAND_IN_SLEEP", "1")))
    yield
    with open(os.environ["STAND_IN_LOG"], "a") as f:
        f.write(json.dumps({"role": role, "pid": os.getpid(), "start": start, "end": time.time()}) + "\n")


def registered_like(real_method: Any):
    """``register(...)`` with the dispatch, execute and blocking modes the installed verl gives
    ``real_method``: the stand-in is dispatched exactly as the worker it replaces."""
    return register(**getattr(real_method, MAGIC_ATTR))


def _unpad_input(hidden_states, attention_mask, unused_mask=None):
    """flash-attn's ``bert_padding.unpad_input`` contract: the tokens the mask keeps, their flat
    indices, the cumulative sequence lengths, the longest length, and the lengths."""
    import torch

    seqlens = attention_mask.sum(-1, dtype=torch.int32)
    indices = attention_mask.flatten().nonzero().flatten()
    cu_seqlens = torch.nn.functional.pad(seqlens.cumsum(0, dtype=torch.int32), (1, 0))
    return hidden_states.flatten(0, 1)[indices], indices, cu_seqlens, int(seqlens.max()), seqlens


def padding_without_flash_attn() -> None:
    """Let the trainer's ``left_right_2_no_padding`` (0.8) unpad batches where flash-attn is absent.

    verl's ``attention_utils`` imports ``flash_attn.bert_padding`` on every non-NPU machine, and
    flash-attn needs CUDA to build (verl's pure-torch copy for NPUs needs einops, which the 0.8
    environment lacks). ``left_right_2_no_padding`` calls only ``unpad_input`` for the batches
    here (no routed experts), so this process gets a stand-in package with that one function.
    The driver only: the stand-in workers never unpad.
    """
    if importlib.util.find_spec("flash_attn") is not None:
        return
    padding = types.ModuleType("flash_attn.bert_padding")
    padding.unpad_input = _unpad_input
    # attention_utils imports four names at once; the three it does not call here fail loudly.
    for name in ("index_first_axis", "pad_input", "rearrange"):
        setattr(padding, name, _missing(name))
    package = types.ModuleType("flash_attn")
    package.bert_padding = padding
    sys.modules["flash_attn"], sys.modules["flash_attn.bert_padding"] = package, padding


def _missing(name: str):
    def missing(*args, **kwargs):
        raise NotImplementedError(f"the test's flash_attn.bert_padding stand-in has no {name}")

    return missing


class Stub:
    def __init__(self, **attributes: Any) -> None:
        vars(self).update(attributes)


class SleepyActorBase(Worker):
    """A worker with no model on the ``actor`` mesh; subclasses add ``update_actor``."""

    def __init__(self) -> None:
        super().__init__()
        self._register_dispatch_collect_info("actor", dp_rank=self.rank, is_collect=True)


def make_trainer(config: dict, critic_cls: type, actor_cls: type) -> Any:
    """Start Ray with two logical GPUs; return a ``RayPPOTrainer`` whose critic and actor worker
    groups live on resource pools of one GPU each. Only ``_update_critic`` / ``_update_actor``
    are meant to run on it, so its constructor (datasets, models, rollout) is skipped."""
    import ray
    from omegaconf import OmegaConf
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.utils import Role

    ray.init(num_cpus=8, num_gpus=2, include_dashboard=False)

    def group(cls: type, pool_name: str) -> Any:
        pool = RayResourcePool([1], use_gpu=True, max_colocate_count=1, name_prefix=pool_name)
        return RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(cls)), device_name="cuda")

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.config = OmegaConf.create(config)
    trainer.global_steps = 1
    # verl-split reads the pools from here to see that actor and critic are split.
    mapping = {Role.ActorRollout: "actor_pool", Role.Critic: "critic_pool"}
    trainer.resource_pool_manager = Stub(mapping=mapping)
    trainer.critic_wg = group(critic_cls, "critic_pool")
    trainer.actor_rollout_wg = group(actor_cls, "actor_pool")
    # Wait until both worker processes are up: on 2 cores one starts seconds after the other,
    # which would read as missing overlap.
    ray.get([w.__ray_ready__.remote() for g in (trainer.critic_wg, trainer.actor_rollout_wg) for w in g.workers])
    return trainer
