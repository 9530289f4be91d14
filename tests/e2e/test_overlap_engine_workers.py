"""verl 0.8's engine critic (``engine_workers.TrainingWorker``) overlaps with the actor update.

Real Ray (logical GPUs), real verl ``RayResourcePool`` / ``RayWorkerGroup`` and ``register``
dispatch, verl's own ``TrainingWorker.train_mini_batch`` (``blocking=False``) and the real
``RayPPOTrainer`` ``_update_critic`` / ``_update_actor`` methods, called in ``fit``'s order.
Stand-ins (see ``tests/plugins/engine_workers_stand_in.py``): the critic's engine (its
per-mini-batch step sleeps) and the actor worker (a plain verl ``Worker`` registered as the
engine actor's ``update_actor``).

This is the nearest real test of the 0.8 overlap path: the CPU dry run, which runs verl's
whole PPO loop, is not ported to 0.8 (see ``tests/families.py``).
"""

from __future__ import annotations

import pytest
from families import only_on
from worker_overlap import run_step, shared

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.ray,
    # 0.7 has the legacy critic (test_overlap_legacy_workers.py); 0.9 runs this path for real in
    # the CPU dry run (test_overlap_e2e.py), where this stand-in would only repeat it.
    only_on("0.8", "stands in for the CPU dry run, which runs on 0.9 only (0.7: test_overlap_legacy_workers.py)"),
]

STEP = """
import json
import torch
from verl import DataProto
from verl.single_controller.base.decorator import MAGIC_ATTR
from verl.workers.engine_workers import TrainingWorker
from verl_split import activation
from engine_workers_stand_in import SleepyActor, SleepyTrainingWorker
from stand_ins import make_trainer, padding_without_flash_attn

padding_without_flash_attn()
mini_batch = {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "data_loader_seed": 0, "shuffle": False}
trainer = make_trainer(
    {
        "trainer": {"critic_warmup": 0},
        "critic": mini_batch,
        "actor_rollout_ref": {
            "rollout": {"n": 1, "multi_turn": {"enable": False}, "temperature": 1.0},
            "actor": {**mini_batch, "calculate_entropy": False, "entropy_coeff": 0.0},
        },
    },
    SleepyTrainingWorker,
    SleepyActor,
)

def batch():
    # Two left-right padded sequences (prompt 2, response 2), as the trainer holds them after rollout.
    attention_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]])
    return DataProto.from_single_dict({
        "input_ids": torch.arange(8).view(2, 4),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": attention_mask[:, 2:],
    })

def step():
    # fit's order: the critic's update, then the actor's, on one batch.
    b = batch()
    return trainer._update_critic(b), trainer._update_actor(b)

# First the stock step, with verl-split's patches undone, on the same workers. It also stands in
# for fit's compute_values: verl asks a mesh for its collect ranks on the first call that
# collects from it, a remote call that queues behind an update running on that worker; in fit,
# compute_values has asked before the critic's first update.
activation.deactivate()
stock_critic, stock_actor = step()
activation.activate()
critic, actor = step()
print(json.dumps({
    "types": [type(r).__name__ for r in (critic, actor)],
    "critic": critic.meta_info["metrics"],
    "actor": actor.meta_info["metrics"],
    "stock_critic": stock_critic.meta_info["metrics"],
    "stock_actor": stock_actor.meta_info["metrics"],
    "blocking": TrainingWorker.train_mini_batch.__dict__[MAGIC_ATTR]["blocking"],
}))
"""


def without_split(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith("split/")}


def stock_results(out: dict) -> None:
    assert out["types"] == ["DataProto", "DataProto"]
    assert without_split(out["critic"]) == out["stock_critic"] == {"critic/loss": [0.5], "perf/mfu/critic": [0.0]}
    assert without_split(out["actor"]) == out["stock_actor"] == {"actor/pg_loss": 0.25, "perf/mfu/actor": 0.0}


def test_engine_critic_overlaps_with_actor_and_results_are_stock(tmp_path):
    out, spans = run_step(STEP, tmp_path, VERL_SPLIT="1")
    assert out["blocking"] is False  # verl 0.8's own metadata: the dispatch returns a future
    # The stock step, then verl-split's.
    assert len(spans["critic"]) == 2 and len(spans["actor"]) == 2, spans
    assert shared(spans["actor"][0], spans["critic"][0]) == 0.0, spans  # stock: one after the other
    assert shared(spans["actor"][1], spans["critic"][1]) >= 0.8, spans
    assert out["actor"]["split/overlapped"] == 1.0
    stock_results(out)


def test_engine_critic_sequential_without_overlap(tmp_path):
    out, spans = run_step(STEP, tmp_path, VERL_SPLIT="1", VERL_SPLIT_OVERLAP="0")
    assert shared(spans["actor"][1], spans["critic"][1]) == 0.0, spans
    assert out["actor"]["split/overlapped"] == 0.0
    stock_results(out)
