"""Rollout on both pools on ``RayPPOTrainer`` (verl 0.9 with ``trainer.use_v1=false``), end to end.

Stock ``main_ppo`` on CPU, ``VERL_SPLIT=1``, placement ``halves`` on 2 logical GPUs (one per pool), every overlap
on (the deferred critic update included), against the same split run with shared rollout off. The stand-ins of
every CPU dry run: verl-split's CPU rollout (Hugging Face ``generate`` for vLLM) and its object-store checkpoint
engine for verl's NCCL one. The coordinator is the v1 trainer's (``tests/e2e/test_shared_rollout_e2e.py``, in the
default suite); what differs here is where it hooks in (``runtime/shared_rollout/hooks.py``: ``init_workers``
and ``LLMServerManager.get_client``) and where its metrics go (verl's tracker, no ``_pending_sync_metrics``).
``RayPPOTrainer`` keeps the data loader's order, so the two runs agree bit for bit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.families import FAMILY
from support.ppo_run import HALVES_STEPS, plugin_env, run_main_ppo

from verl_split.core import compat
from verl_split.dryrun.recipe import dry_run_overrides

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not compat.verl_in(compat.SHARED_ROLLOUT_V0), reason="no shared rollout on RayPPOTrainer here"),
]
if compat.family_in(FAMILY, compat.SHARED_ROLLOUT_V1):
    # The default suite runs shared rollout on the v1 trainer there, through the same coordinator.
    pytestmark.append(pytest.mark.extended(reason="shared rollout runs on the v1 trainer in the default suite"))

#: As in test_shared_rollout_e2e.py: 8 requests a step at 0.25 s each, and a critic update that outlasts the
#: actor's and runs on into the next step's generation, which the critic pool then joins late.
SLOW = {"SLOW_GENERATE_SLEEP": "0.25", "SLOW_UPDATES_SLEEP_CRITIC": "1.0"}
COMPARED = (
    "response_length/mean",
    "critic/score/mean",
    "critic/advantages/mean",
    "critic/values/mean",
    "critic/vf_loss",
    "critic/grad_norm",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
)


def _run(tiny_assets, out: Path, **env: str):
    overrides = dry_run_overrides(tiny_assets, HALVES_STEPS, "gae", "v0", out, n_gpus_per_node=2)
    environment = plugin_env(out, VERL_SPLIT="1", VERL_SPLIT_PLACEMENT="halves", RAY_DEDUP_LOGS="0", **SLOW, **env)
    run = run_main_ppo(overrides, out, env=environment)
    run.assert_ok()
    return run


@pytest.fixture(scope="module")
def shared_and_plain(tiny_assets, tmp_path_factory):
    shared_out = tmp_path_factory.mktemp("v0_shared")
    shared = _run(tiny_assets, shared_out, VERL_SPLIT_SHARED_ROLLOUT="1")
    plain = _run(tiny_assets, tmp_path_factory.mktemp("v0_plain"))
    return shared_out, shared, plain


def test_both_pools_generate_and_the_critic_pool_joins_late(shared_and_plain):
    out, run, _ = shared_and_plain
    assert "shared rollout: 1 rollout replica(s) on the critic pool (replica ranks [1]" in run.log
    first, second = run.metrics
    shares = run.series("split/critic_pool_rollout_share")
    assert len(shares) == HALVES_STEPS and all(0.0 < s < 1.0 for s in shares), shares
    assert len(run.series("split/shared_rollout_sync_s")) == HALVES_STEPS
    # Step 1: both pools from the start (the first weights are pushed at start-up). Step 2: step 1's critic
    # update ran on (deferred), the actor pool generated meanwhile, the critic pool joined after it.
    assert first["split/critic_pool_joined"] == 1.0 and first["split/critic_pool_join_s"] == 0.0
    assert first["split/critic_update_deferred"] == 1.0
    assert "shared rollout: the critic pool joined step 2's generation after the critic's update" in run.log
    assert second["split/critic_pool_joined"] == 1.0 and second["split/critic_pool_join_s"] > 0.0, second
    for step in range(1, HALVES_STEPS + 1):
        for replica in (0, 1):
            assert f"replica {replica} generates with the weights of step {step - 1}" in run.log, (replica, step)
            assert re.search(rf"replica {replica} loaded \d+ tensors \(step {step - 1}\)", run.log), (replica, step)
    # The critic's update and the critic pool's generation never shared its GPU, as the processes saw it.
    records = [json.loads(line) for line in (out / "updates.jsonl").read_text().splitlines()]
    ends = sorted(r["end"] for r in records if r.get("role") == "critic" and r["phase"] == "update" and "end" in r)
    late = [r["start"] for r in records if r["phase"] == "generate" and r["replica"] == 1 and r["weights"] == 1]
    assert late and ends and min(late) > ends[0], (late, ends)


def test_same_numbers_as_without_shared_rollout(shared_and_plain):
    """Bit for bit: the CPU rollout seeds each sample from its prompt and the weights' step, not the replica."""
    _, shared, plain = shared_and_plain
    assert "split/critic_pool_rollout_share" not in plain.metrics[0]
    for key in COMPARED:
        assert shared.series(key) == plain.series(key), key
