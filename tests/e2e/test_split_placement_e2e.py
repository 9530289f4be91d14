"""Stock ``python -m verl.trainer.main_ppo`` on CPU with ``VERL_SPLIT=1``: the critic on its own pool.

Uses the CPU dry run's runner and overrides (tests/conftest.py, verl_split/tools/demo.py): real verl,
Ray, torch and FSDP2 workers; the rollout engine is verl-split's CPU stand-in for vLLM.
Two logical GPUs: ``halves`` puts the actor (with rollout and ref) on one, the critic on the other,
each pool in its own placement group pinned to its planned node.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_split.dryrun.recipe import dry_run_overrides

pytestmark = pytest.mark.e2e

STEPS = 2


def update_sites(out: Path) -> dict[str, set[tuple[int, str]]]:
    """Per role, the (process id, placement group id) its updates ran in, as the workers saw it."""
    sites: dict[str, set[tuple[int, str]]] = {"actor": set(), "critic": set()}
    for line in (out / "updates.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "placement_group" in record:
            sites[record["role"]].add((record["pid"], record["placement_group"]))
    return sites


@pytest.mark.extended(
    reason="test_overlap_e2e.py's runs are split placement too, and check each pool's placement group and processes; "
    "the example's run (test_examples_e2e.py) the pools on 2 logical GPUs"
)
def test_ppo_gae_split_halves(halves_split_run):
    from support.ppo_run import HALVES_STEPS

    out, run = halves_split_run  # tests/conftest.py
    run.assert_ok()
    sites = update_sites(out)
    (actor_pid, actor_pg), (critic_pid, critic_pg) = sites["actor"].pop(), sites["critic"].pop()
    assert not sites["actor"] and not sites["critic"], "one worker per pool expected"
    assert actor_pid != critic_pid and actor_pg != critic_pg
    assert "Creating resource pool: actor_rollout_ref_pool with [1] GPUs" in run.log
    assert "Creating resource pool: critic_pool with [1] GPUs" in run.log
    assert "Pinned resource pool actor_rollout_ref_pool to plan nodes [0]" in run.log
    assert "Pinned resource pool critic_pool to plan nodes [0]" in run.log
    assert "Creating resource pool: global_pool" not in run.log
    assert [m["step"] for m in run.metrics] == list(range(1, HALVES_STEPS + 1))
    for key in ("critic/vf_loss", "actor/pg_loss"):
        run.assert_finite(key)


@pytest.mark.extended(
    reason="test_placement_seams.py shows verl's own pools without VERL_SPLIT (v1 on 0.9, RayPPOTrainer on 0.7/0.8), "
    "and the demo's stock run (test_demo_e2e.py) trains with no split metric"
)
def test_without_verl_split_the_layout_is_stock(tiny_assets, tmp_path):
    from support.ppo_run import plugin_env, run_main_ppo

    out = tmp_path / "stock"
    out.mkdir(parents=True)
    overrides = dry_run_overrides(tiny_assets, 1, "gae", None, out, n_gpus_per_node=2)
    run = run_main_ppo(overrides, out, env=plugin_env(out))
    run.assert_ok()
    assert "Creating resource pool" not in run.log and "split/overlapped" not in run.metrics[0]
    sites = update_sites(out)
    # Stock verl: one global_pool, actor and critic fused into the same worker processes.
    assert {pg for _, pg in sites["actor"]} == {pg for _, pg in sites["critic"]}
    assert {pid for pid, _ in sites["actor"]} == {pid for pid, _ in sites["critic"]}


@pytest.mark.extended(
    reason="tests/runtime/placement/test_placement_seams.py runs `python -m verl.trainer.main_ppo` with bad "
    "placements and checks the same: the error, no Ray started, no traceback"
)
def test_bad_placement_stops_main_ppo_before_ray(tiny_assets, tmp_path):
    from support.ppo_run import run_main_ppo

    out = tmp_path / "split_bad"
    overrides = dry_run_overrides(tiny_assets, STEPS, "gae", None, out, n_gpus_per_node=2)
    run = run_main_ppo([*overrides, "+split_placement.placement=3:1"], out, env={"VERL_SPLIT": "1"}, timeout=180)
    assert run.returncode == 1
    assert "verl-split: split placement: split_placement.placement='3:1' asks for 4 GPUs per node" in run.log
    assert "Started a local Ray instance" not in run.log
    assert "Traceback" not in run.log
