"""The example scripts (examples/split_placement/*.sh) run by bash with a stand-in interpreter that records
the arguments: the overrides ``run_deepseek7b_llm.sh`` passes compose with the installed verl and plan."""

from __future__ import annotations

import subprocess

import pytest
from support.examples import FITS_6_2, compose_split, script_arguments
from support.paths import EXAMPLE

from verl_split import placement as planner

pytestmark = pytest.mark.subprocess


def test_deepseek_script_runs_main_ppo_split_with_verls_keys(tmp_path):
    argv = script_arguments(EXAMPLE / "run_deepseek7b_llm.sh", tmp_path)
    assert argv[0] == str(EXAMPLE / "main_ppo_split.py")
    overrides = argv[1:]
    assert overrides and all("=" in o and not o.startswith("+") for o in overrides), overrides
    config = compose_split(overrides)  # a key the installed verl lacks fails here
    assert config.actor_rollout_ref.rollout.name == "vllm"
    assert config.actor_rollout_ref.model.path == config.critic.model.path == "deepseek-ai/deepseek-llm-7b-chat"
    assert config.data.train_files == str(tmp_path / "data" / "gsm8k" / "train.parquet")
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (1, 8)
    plan = planner.plan_from_config(config, env_value="")
    assert plan.resource_pool_spec == {"actor_rollout_ref_pool": [4], "critic_pool": [4]}
    assert set(plan.pool("actor_rollout_ref_pool").roles) == {"actor", "rollout", "ref"}
    # verl's own rules for which roles the run builds (verl's validate_config would also fetch
    # the model's config from the hub, so it is left to the real run).
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    assert need_reference_policy(config) and need_critic(config)


@pytest.mark.parametrize(
    ("extra", "env"),
    [
        (["split_placement.placement=6:2", *FITS_6_2], {}),
        (FITS_6_2, {"VERL_SPLIT_PLACEMENT": "6:2"}),
    ],
    ids=["override", "environment"],
)
def test_deepseek_script_takes_the_placement_from_overrides_or_the_environment(tmp_path, monkeypatch, extra, env):
    # Every layout the header advertises is planned on every family in test_placement_recipe.
    argv = script_arguments(EXAMPLE / "run_deepseek7b_llm.sh", tmp_path, *extra, env=env)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = compose_split(argv[1:])
    plan = planner.plan_from_config(config, env_value="")
    assert plan.resource_pool_spec == {"actor_rollout_ref_pool": [6], "critic_pool": [2]}


def test_tiny_cpu_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(EXAMPLE / "run_tiny_cpu.sh")], check=True)
