"""Concurrent actor and critic updates, end to end: stock ``main_ppo`` on CPU with ``VERL_SPLIT=1``.

The update intervals checked here are logged *inside the worker processes* by the
test plugin ``tests/plugins/slow_updates.py`` (loaded through verl's own
``VERL_USE_EXTERNAL_MODULES``), which also injects the sleeps and the faults. The only
stand-in in these runs is verl-split's CPU rollout (Hugging Face ``generate``
instead of vLLM), as in every CPU dry run.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import torch
from conftest import PPORun, run_main_ppo
from families import DEFAULT_TRAINER

from verl_split.demo import dry_run_overrides

pytestmark = pytest.mark.e2e

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
SLEEP_S = 2.0


def split_env(out: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_SPLIT", "SLOW_UPDATES"))}
    env.update(
        VERL_SPLIT="1",
        PYTHONPATH=os.pathsep.join(filter(None, [PLUGINS, os.environ.get("PYTHONPATH")])),
        VERL_USE_EXTERNAL_MODULES="slow_updates",
        SLOW_UPDATES_LOG=str(out / "updates.jsonl"),
        **extra,
    )
    return env


def worker_intervals(out: Path) -> dict[str, list[tuple[float, float]]]:
    """Per role, the (start, end) of each update as the worker process saw it, in order."""
    intervals: dict[str, list[tuple[float, float]]] = {"actor": [], "critic": []}
    for line in (out / "updates.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "end" in record:
            intervals[record["role"]].append((record["start"], record["end"]))
    return {role: sorted(spans) for role, spans in intervals.items()}


def shared_fraction(a: tuple[float, float], b: tuple[float, float]) -> float:
    """How much of the shorter interval the two intervals share."""
    shared = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    return shared / min(a[1] - a[0], b[1] - b[0])


def final_weights(run_dir: Path, role: str) -> dict[str, torch.Tensor]:
    step_dirs = sorted((run_dir / "checkpoints").glob("global_step_*"), key=lambda p: int(p.name.split("_")[-1]))
    assert step_dirs, f"no checkpoint under {run_dir / 'checkpoints'}"
    state = torch.load(step_dirs[-1] / role / "model_world_size_1_rank_0.pt", weights_only=False)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}


def run_split(tiny_assets, out: Path, steps: int, extra: list[str], trainer: str | None = None, **env: str) -> PPORun:
    overrides = dry_run_overrides(tiny_assets, steps, "gae", trainer, out, n_gpus_per_node=2) + extra
    return run_main_ppo(overrides, out, env=split_env(out, **env))


@pytest.fixture(scope="module")
def overlapped_and_sequential(tiny_assets, tmp_path_factory):
    """The same 3-step split run twice: updates overlapped, and one after the other."""
    runs = {}
    for name, overlap in (("overlap", "1"), ("sequential", "0")):
        out = tmp_path_factory.mktemp(name)
        runs[name] = (
            out,
            run_split(
                tiny_assets,
                out,
                steps=3,
                extra=["trainer.save_freq=3"],
                VERL_SPLIT_OVERLAP=overlap,
                SLOW_UPDATES_SLEEP=str(SLEEP_S),
            ),
        )
    return runs


def test_updates_overlap_in_every_step(overlapped_and_sequential):
    out, run = overlapped_and_sequential["overlap"]
    run.assert_ok()
    spans = worker_intervals(out)
    assert len(spans["actor"]) == len(spans["critic"]) == 3, spans
    for actor, critic in zip(spans["actor"], spans["critic"], strict=True):
        assert shared_fraction(actor, critic) >= 0.8, (actor, critic)
    assert "Starting parallel actor and critic updates" in run.log
    assert re.search(r"Actor update completed in \d+\.\ds", run.log)
    assert re.search(r"Critic update completed in \d+\.\ds", run.log)
    # verl-split's own per-step metrics, in verl's tracker, agree with the workers.
    assert run.series("split/overlapped") == [1.0, 1.0, 1.0]
    for overlap_s, actor_s, critic_s in zip(
        run.series("split/overlap_s"),
        run.series("split/actor_update_s"),
        run.series("split/critic_update_s"),
        strict=True,
    ):
        assert overlap_s >= 0.8 * min(actor_s, critic_s)
        assert min(actor_s, critic_s) >= SLEEP_S
    assert all(s > 1.5 for s in run.series("split/speedup")), run.series("split/speedup")


def test_sequential_run_does_not_overlap(overlapped_and_sequential):
    out, run = overlapped_and_sequential["sequential"]
    run.assert_ok()
    spans = worker_intervals(out)
    assert len(spans["actor"]) == len(spans["critic"]) == 3, spans
    for actor, critic in zip(spans["actor"], spans["critic"], strict=True):
        assert shared_fraction(actor, critic) == 0.0, (actor, critic)
    assert "Starting parallel actor and critic updates" not in run.log
    assert run.series("split/overlapped") == [0.0, 0.0, 0.0]


def assert_same_numbers(
    over_dir: Path, over: PPORun, seq_dir: Path, seq: PPORun, tolerance: float, weight_tolerance: float
) -> None:
    over.assert_ok()
    seq.assert_ok()
    for key in ("critic/vf_loss", "actor/pg_loss", "actor/entropy", "critic/score/mean", "critic/values/mean"):
        a, b = over.series(key), seq.series(key)
        assert len(a) == len(b) > 0, key
        assert a == pytest.approx(b, rel=tolerance, abs=tolerance), key
    for role in ("actor", "critic"):
        a, b = final_weights(over_dir, role), final_weights(seq_dir, role)
        assert a.keys() == b.keys()
        for name in a:
            assert torch.allclose(a[name], b[name], rtol=0.0, atol=weight_tolerance), f"{role} {name} differs"


def test_overlap_changes_no_numbers(overlapped_and_sequential):
    """verl's default trainer: same losses and weights; on v1 (0.9) up to float summation order.

    verl's v1 trainer assembles a step's samples in TransferQueue in the order the
    rollouts finish, which varies from run to run whatever the updates do, so sums over
    the batch may differ in their last bits (seen: 1e-9 on critic/values/mean before any
    update). Adam then turns such noise on near-zero gradients into differences of up to a
    fraction of one step (seen after 3 steps: 2e-6 on the actor's weights, 9e-5 on the
    critic's; lr is 1e-3), so weights are compared to 1e-3 and losses to 1e-5. RayPPOTrainer
    (v0, the default before 0.9) keeps the data loader's order: bit-for-bit equality.
    """
    (over_dir, over), (seq_dir, seq) = overlapped_and_sequential["overlap"], overlapped_and_sequential["sequential"]
    tolerance, weight_tolerance = (1e-5, 1e-3) if DEFAULT_TRAINER == "v1" else (0.0, 0.0)
    assert_same_numbers(over_dir, over, seq_dir, seq, tolerance=tolerance, weight_tolerance=weight_tolerance)


def test_v0_trainer_with_critic_warmup_overlaps_and_keeps_numbers(tiny_assets, tmp_path_factory):
    """Legacy trainer: step 1 is critic warm-up (critic only), steps 2-3 overlap; and the
    same job without overlap gives bit-for-bit the same losses and weights."""
    runs = {}
    for name, overlap in (("overlap", "1"), ("sequential", "0")):
        out = tmp_path_factory.mktemp(f"v0_{name}")
        extra = ["trainer.critic_warmup=2", "trainer.save_freq=3"]  # steps count from 1: step 1 warms up
        run = run_split(
            tiny_assets, out, steps=3, extra=extra, trainer="v0", VERL_SPLIT_OVERLAP=overlap, SLOW_UPDATES_SLEEP="1"
        )
        run.assert_ok()
        runs[name] = (out, run)
    out, run = runs["overlap"]
    spans = worker_intervals(out)
    assert len(spans["critic"]) == 3 and len(spans["actor"]) == 2, spans
    for actor, critic in zip(spans["actor"], spans["critic"][1:], strict=True):
        assert shared_fraction(actor, critic) >= 0.8, (actor, critic)
    assert run.series("split/overlapped") == [0.0, 1.0, 1.0]
    assert len(run.series("split/actor_update_s")) == 2
    assert_same_numbers(*runs["overlap"], *runs["sequential"], tolerance=0.0, weight_tolerance=0.0)


def test_grpo_without_critic(tiny_assets, tmp_path):
    """No critic (verl issue 319 crashed here once blocking=False was set by hand)."""
    overrides = dry_run_overrides(tiny_assets, 2, "grpo", None, tmp_path, n_gpus_per_node=2)
    run = run_main_ppo(overrides, tmp_path, env=split_env(tmp_path))
    run.assert_ok()
    run.assert_finite("actor/pg_loss")
    assert not run.series("split/overlapped")


@pytest.mark.parametrize(
    ("fault", "role", "pool"),
    [("SLOW_UPDATES_FAIL", "critic", "critic_pool"), ("SLOW_UPDATES_KILL", "actor", "actor_rollout_ref_pool")],
)
def test_a_failed_update_ends_the_run_promptly(tiny_assets, tmp_path, fault, role, pool):
    started = time.time()
    run = run_split(tiny_assets, tmp_path, steps=2, extra=[], SLOW_UPDATES_SLEEP="1", **{fault: role})
    ended = started + run.wall_s
    assert run.returncode != 0
    assert f"the {role} update failed on resource pool {pool!r}" in run.log, run.log[-4000:]
    fault_time = next(
        json.loads(line)["start"]
        for line in (tmp_path / "updates.jsonl").read_text().splitlines()
        if json.loads(line)["role"] == role
    )
    assert ended - fault_time < 30, f"the run took {ended - fault_time:.0f}s to end after the {role} failed"
