"""The reference on the critic's pool, end to end: stock ``main_ppo`` on CPU with ``VERL_SPLIT=1``, RayPPOTrainer.

Two 2-step GAE runs with a KL loss (so a reference runs) on 2 logical GPUs, the same job and seed: the reference
beside the critic (``actor,rollout:0;critic,ref:1``) and beside the actor (``actor,rollout:0;critic:1``). The test
plugin (tests/support/plugins/slow_updates.py) logs, inside the workers, the process and Ray placement group each
call ran in. verl's v1 trainer cannot run the layout (it keeps the reference in the actor's worker): refused before
Ray starts, in tests/placement/test_reference_placement.py.

Why the numbers are bit for bit the same: a sample's reference log-probs depend only on its tokens and the
reference's weights, loaded from the same files; both layouts give the reference one data-parallel rank (one GPU
either way) and the same micro-batches (``actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu``), so every
forward pass sees the same rows in the same order, in fp32 on the CPU. Only where the pass runs changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.ppo_run import PPORun, plugin_env, run_main_ppo

from verl_split.dryrun.recipe import dry_run_overrides

pytestmark = pytest.mark.e2e

STEPS = 2
APART = "actor,rollout:0;critic,ref:1"
TOGETHER = "actor,rollout:0;critic:1"
#: Every number a step logs that the reference's log-probs reach (the KL loss, then the losses and the update).
SAME = (
    "actor/kl_loss",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "critic/vf_loss",
    "critic/values/mean",
    "critic/advantages/mean",
    "critic/returns/mean",
    "critic/score/mean",
    "response_length/mean",
)


def run(tiny_assets, out: Path, placement: str) -> PPORun:
    overrides = dry_run_overrides(tiny_assets, STEPS, "gae", "v0", out, n_gpus_per_node=2)
    overrides.append("actor_rollout_ref.actor.use_kl_loss=true")
    return run_main_ppo(overrides, out, env=plugin_env(out, VERL_SPLIT="1", VERL_SPLIT_PLACEMENT=placement))


def sites(out: Path, method: str) -> set[tuple[int, str]]:
    """(process id, placement group id) of every call of a worker method, as the workers logged them."""
    records = [json.loads(line) for line in (out / "updates.jsonl").read_text().splitlines()]
    return {(r["pid"], r["placement_group"]) for r in records if r["method"] == method and "placement_group" in r}


@pytest.fixture(scope="module")
def apart_and_together(tiny_assets, tmp_path_factory) -> dict[str, tuple[Path, PPORun]]:
    runs = {}
    for name, placement in (("apart", APART), ("together", TOGETHER)):
        out = tmp_path_factory.mktemp(f"ref_{name}")
        runs[name] = (out, run(tiny_assets, out, placement))
    return runs


def test_the_reference_worker_group_runs_on_the_critics_pool(apart_and_together):
    out, apart = apart_and_together["apart"]
    apart.assert_ok()
    assert "The reference runs in a worker group of its own (Role.RefPolicy) on resource pool critic_pool" in apart.log
    assert "Creating resource pool: critic_pool with [1] GPUs" in apart.log
    ref, values, old_log_prob = (sites(out, m) for m in ("compute_ref_log_prob", "infer_batch", "compute_log_prob"))
    assert len(ref) == 1 and ref == values, (ref, values)  # the critic's processes (one WorkerDict per GPU)
    assert not ref & old_log_prob, (ref, old_log_prob)
    # Values beside old_log_prob would meet ref in the same processes: the preparation runs in order, and says why.
    assert "the reference runs beside the critic on resource pool 'critic_pool'" in apart.log
    assert apart.series("split/prep_overlapped") == [0.0] * STEPS

    out, together = apart_and_together["together"]
    together.assert_ok()
    assert sites(out, "compute_ref_log_prob") == sites(out, "compute_log_prob")  # inside the actor's worker


def test_the_numbers_are_the_same_bit_for_bit(apart_and_together):
    (_, apart), (_, together) = apart_and_together["apart"], apart_and_together["together"]
    for key in SAME:
        a, b = apart.series(key), together.series(key)
        assert len(a) == STEPS and a == b, (key, a, b)
    assert any(v != 0.0 for v in apart.series("actor/kl_loss")[1:]), "the KL loss never saw the policy move"
    for name, run in (("ref beside the critic", apart), ("ref beside the actor", together)):
        ref, step = run.series("timing_s/ref"), run.series("timing_s/step")
        print(f"\n{name}: actor/kl_loss {run.series('actor/kl_loss')}, timing_s/ref {ref}, timing_s/step {step}")
