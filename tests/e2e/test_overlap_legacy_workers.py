"""verl 0.7's legacy critic (``fsdp_workers.CriticWorker``) overlaps with the actor update.

Real Ray (logical GPUs), real verl ``RayResourcePool`` / ``RayWorkerGroup`` and ``register``
dispatch, verl's legacy ``CriticWorker.update_critic`` and the real ``RayPPOTrainer``
``_update_critic`` / ``_update_actor`` methods, called in ``fit``'s order. Stand-ins (see
``tests/plugins/legacy_workers.py``): the critic's model (the inner update sleeps) and the
actor worker (a plain verl ``Worker`` with a blocking, sleeping ``update_actor``).

This is the nearest real test of the 0.7 overlap path: verl 0.7's own PPO loop cannot run on
a CPU machine (see ``test_cpu_dry_run.py``'s family note).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyrun import run_json

from verl_split import compat

VERSION = compat.installed_version() or "0"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.ray,
    pytest.mark.skipif(
        compat.family_of(VERSION) != "0.7",
        reason=f"verl {VERSION} has no legacy fsdp_workers.CriticWorker (verl 0.7 only)",
    ),
]

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
SLEEP_S = 2.0

STEP = """
import json, os, time
import ray, torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.single_controller.base.decorator import MAGIC_ATTR
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role
from verl.workers.fsdp_workers import CriticWorker
from legacy_workers import SleepyActor, SleepyCritic

ray.init(num_cpus=8, num_gpus=2, include_dashboard=False)

def group(cls, name):
    pool = RayResourcePool([1], use_gpu=True, max_colocate_count=1, name_prefix=name)
    return RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(cls)), device_name="cuda")

trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # only the two update methods run
trainer.config = OmegaConf.create({
    "trainer": {"critic_warmup": 0},
    "actor_rollout_ref": {"rollout": {"multi_turn": {"enable": False}, "temperature": 1.0}},
})
trainer.use_legacy_worker_impl = "auto"
trainer.global_steps = 1
mapping = {Role.ActorRollout: "actor_pool", Role.Critic: "critic_pool"}
trainer.resource_pool_manager = type("Manager", (), {"mapping": mapping})()
trainer.critic_wg = group(SleepyCritic, "critic_pool")
trainer.actor_rollout_wg = group(SleepyActor, "actor_pool")
# Wait until both worker processes are up: on 2 cores one starts seconds after the other.
ray.get([w.__ray_ready__.remote() for g in (trainer.critic_wg, trainer.actor_rollout_wg) for w in g.workers])

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


def run_step(tmp_path: Path, **env: str) -> tuple[dict, dict[str, list[tuple[float, float]]]]:
    log = tmp_path / "updates.jsonl"
    out = run_json(
        STEP,
        env={"PYTHONPATH": PLUGINS, "LEGACY_LOG": str(log), "LEGACY_SLEEP": str(SLEEP_S), **env},
        timeout=300,
    )
    spans: dict[str, list[tuple[float, float]]] = {"actor": [], "critic": []}
    for line in log.read_text().splitlines():
        record = json.loads(line)
        spans[record["role"]].append((record["start"], record["end"]))
    return out, spans


def shared(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) / min(a[1] - a[0], b[1] - b[0])


def test_legacy_critic_overlaps_and_callers_outside_the_step_get_results(tmp_path):
    out, spans = run_step(tmp_path, VERL_SPLIT="1")
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
    out, spans = run_step(tmp_path, VERL_SPLIT="1", VERL_SPLIT_OVERLAP="0")
    assert shared(spans["actor"][0], spans["critic"][1]) == 0.0, spans
    assert out["critic_type"] == "DataProto"
