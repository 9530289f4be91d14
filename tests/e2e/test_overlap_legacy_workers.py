"""verl 0.7's legacy critic (``fsdp_workers.CriticWorker``) overlaps with the actor update.

Real Ray (logical GPUs), real verl ``RayResourcePool`` / ``RayWorkerGroup`` and ``register``
dispatch, verl's legacy ``CriticWorker.update_critic`` and the real ``RayPPOTrainer``
``_update_critic`` / ``_update_actor`` methods, called in ``fit``'s order. Stand-ins (see
``tests/plugins/legacy_workers.py``): the critic's model (the inner update sleeps) and the
actor worker (a plain verl ``Worker`` registered as the legacy actor's ``update_actor``).

This is the nearest real test of the 0.7 overlap path: verl 0.7's own PPO loop cannot run on
a CPU machine (see ``test_cpu_dry_run.py``'s family note).
"""

from __future__ import annotations

import pytest
from families import only_on
from worker_overlap import run_step, shared

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.ray,
    only_on("0.7", "the legacy fsdp_workers.CriticWorker this test drives exists in verl 0.7 only"),
]

STEP = """
import json
import torch
from verl import DataProto
from verl.single_controller.base.decorator import MAGIC_ATTR
from verl.workers.fsdp_workers import CriticWorker
from legacy_workers import SleepyActor, SleepyCritic
from stand_ins import make_trainer

trainer = make_trainer(
    {
        "trainer": {"critic_warmup": 0},
        "actor_rollout_ref": {"rollout": {"multi_turn": {"enable": False}, "temperature": 1.0}},
    },
    SleepyCritic,
    SleepyActor,
)
trainer.use_legacy_worker_impl = "auto"  # 0.7's trainer: the legacy workers' branch

def batch():
    return DataProto.from_single_dict({"x": torch.zeros(2, 3)}, meta_info={"global_token_num": [6, 6]})

# A caller outside the coordinated step gets the materialised result. This first call also
# makes verl ask the critic for its mesh's collect ranks (collect_lazy_compute_data_proto), a
# remote call that would queue behind a running update; in fit, compute_values does it first.
direct = trainer.critic_wg.update_critic(batch())
# fit's order: the critic's update, its metrics, then the actor's.
b = batch()
critic_output = trainer._update_critic(b)
critic_type = type(critic_output).__name__
critic_metrics = dict(critic_output.meta_info["metrics"])
actor_output = trainer._update_actor(b)
print(json.dumps({
    "critic_type": critic_type,
    "critic_metrics": sorted(critic_metrics),
    "actor_metrics": sorted(actor_output.meta_info["metrics"]),
    "direct_type": type(direct).__name__,
    "direct_loss": direct.meta_info["metrics"]["critic/vf_loss"],
    "verl_blocking": CriticWorker.update_critic.__wrapped__.__dict__[MAGIC_ATTR]["blocking"],
    "patched_blocking": repr(CriticWorker.update_critic.__dict__[MAGIC_ATTR]["blocking"]),
}))
"""


def test_legacy_critic_overlaps_and_callers_outside_the_step_get_results(tmp_path):
    out, spans = run_step(STEP, tmp_path, VERL_SPLIT="1")
    assert len(spans["critic"]) == 2 and len(spans["actor"]) == 1, spans  # the direct call, then the step
    assert shared(spans["actor"][0], spans["critic"][1]) >= 0.8, spans
    assert out["critic_type"] == out["direct_type"] == "DataProto"
    assert "split/overlapped" in out["critic_metrics"] or "split/overlapped" in out["actor_metrics"]
    assert "critic/vf_loss" in out["critic_metrics"] and "actor/pg_loss" in out["actor_metrics"]
    assert out["direct_loss"] == [0.5]  # one value per critic rank, as verl collects them
    # verl's own register metadata is untouched; the class attribute carries a copy.
    assert out["verl_blocking"] is True
    assert out["patched_blocking"] == "verl_split.legacy.DEFERRED"


def test_legacy_critic_sequential_without_overlap(tmp_path):
    out, spans = run_step(STEP, tmp_path, VERL_SPLIT="1", VERL_SPLIT_OVERLAP="0")
    assert shared(spans["actor"][0], spans["critic"][1]) == 0.0, spans
    assert out["critic_type"] == "DataProto"
