"""verl's own Megatron recipes, planned as verl-split would plan them on 1, 2 and 4 nodes of 8 GPUs.

The override lines of two recipes on verl's main (verl-project/verl@1dda039, the scripts' defaults filled in),
quoted as data: ``examples/ppo_trainer/run_qwen3_8b_megatron.sh`` (PPO, Qwen3-8B, actor and critic at TP=2 x
PP=2) and ``examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh`` (GRPO, the Qwen3-30B-A3B MoE, TP=4 x PP=2 x
VPP=2 x EP=2). Each is composed with hydra against the installed verl's ``ppo_trainer`` (a key that verl's
main has and the installed release lacks gets hydra's ``+``), with the models' shapes in a ``config.json``
(their published sizes), and planned as the launching process plans it. A plan passes where verl would
run and is refused, with the reason, where megatron-core would stop it.
"""

from __future__ import annotations

import pytest
from support.megatron_recipes import (
    GRPO_30B_A3B,
    GRPO_30B_A3B_DEFAULTS,
    PPO_8B,
    PPO_8B_DEFAULTS,
    QWEN3_8B,
    QWEN3_30B_A3B,
    WITH_CRITIC,
    recipe,
)

from verl_split import placement as planner
from verl_split.core.errors import PlacementError

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def models(model_folder):
    """Each model's folder, by name."""
    shapes = {"Qwen3-8B": QWEN3_8B, "Qwen3-30B-A3B": QWEN3_30B_A3B}
    return {name: model_folder(name, shape) for name, shape in shapes.items()}


def plan(config):
    return planner.plan_from_config(config, env_value="")


@pytest.mark.parametrize("nnodes", [1, 2, 4])
def test_the_ppo_recipe_plans_at_its_defaults(models, nnodes):
    config = recipe(PPO_8B, PPO_8B_DEFAULTS, nnodes, str(models["Qwen3-8B"]))
    halves = plan(config)  # the default placement: one node in halves, several in two node groups
    side = 4 if nnodes == 1 else 8 * nnodes // 2
    assert [halves.pool(name).size for name in ("actor_rollout_ref_pool", "critic_pool")] == [side, side]
    stock = plan(recipe(PPO_8B, PPO_8B_DEFAULTS, nnodes, str(models["Qwen3-8B"]), "+split_placement.placement=all"))
    # verl's own layout: the critic shares the actor's processes, hence its mesh (here the same TP=2 x PP=2).
    assert any("the critic shares global_pool's processes with the actor" in note for note in stock.notes)


def test_the_ppo_recipe_refuses_a_pool_its_model_parallel_size_does_not_divide(models):
    config = recipe(PPO_8B, PPO_8B_DEFAULTS, 1, str(models["Qwen3-8B"]), "+split_placement.placement=6:2")
    with pytest.raises(PlacementError, match=r"actor_rollout_ref_pool has 6 GPUs, which is not divisible by .*=4"):
        plan(config)


def test_the_ppo_recipe_with_a_bigger_actor_mesh_than_the_critics(models):
    # ACTOR_TP=4 (ACTOR_PP=2): an 8-GPU actor replica beside the critic's TP=2 x PP=2.
    bigger = {**PPO_8B_DEFAULTS, "actor_tp": 4}
    path = str(models["Qwen3-8B"])
    # verl's own layout keeps one mesh per process, the critic's engine built first: refused.
    with pytest.raises(PlacementError, match=r"critic has TP=2 x PP=2 x CP=1; actor has TP=4 x PP=2 x CP=1"):
        plan(recipe(PPO_8B, bigger, 1, path, "+split_placement.placement=all"))
    # Split placement lets the two differ, once the actor's side holds a replica: not at 4 GPUs, at 8.
    with pytest.raises(PlacementError, match=r"actor_rollout_ref_pool has 4 GPUs, which is not divisible by .*=8"):
        plan(recipe(PPO_8B, bigger, 1, path))
    assert plan(recipe(PPO_8B, bigger, 2, path)).resource_pool_spec == {
        "actor_rollout_ref_pool": [8],
        "critic_pool": [8],
    }


@pytest.mark.parametrize(("nnodes", "runs"), [(1, False), (2, True), (4, True)])
def test_the_moe_recipe_plans_where_megatron_core_would_run_it(models, nnodes, runs):
    # GRPO: no critic, so every GPU is one global_pool, as in stock verl. ETP is unset, so megatron-core takes
    # TP=4: ETP x EP x PP = 4 x 2 x 2 = 16 GPUs, more than one node holds.
    config = recipe(GRPO_30B_A3B, GRPO_30B_A3B_DEFAULTS, nnodes, str(models["Qwen3-30B-A3B"]))
    if runs:
        assert plan(config).resource_pool_spec == {"global_pool": [8] * nnodes}
        return
    with pytest.raises(PlacementError) as exc:
        plan(config)
    message = str(exc.value)
    assert "actor on global_pool (8 GPUs) is not a multiple of" in message and "= 16" in message
    assert "(initialize_model_parallel in megatron/core/parallel_state.py, called by verl's" in message
    assert "expert_tensor_parallel_size=2" in message and "expert_model_parallel_size=1" in message
    # The fix it names plans: ETP=2 makes the experts' replica 2 x 2 x 2 = 8 GPUs.
    fixed = "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=2"
    assert plan(recipe(GRPO_30B_A3B, GRPO_30B_A3B_DEFAULTS, 1, str(models["Qwen3-30B-A3B"]), fixed))


@pytest.mark.parametrize(("nnodes", "refusal"), [(2, "(8 GPUs) is not a multiple of"), (4, None)])
def test_the_moe_recipe_with_a_critic_splits_from_four_nodes(models, nnodes, refusal):
    # halves gives each side half the GPUs; the experts' 16 GPUs then need 4 nodes.
    config = recipe(GRPO_30B_A3B + WITH_CRITIC, GRPO_30B_A3B_DEFAULTS, nnodes, str(models["Qwen3-30B-A3B"]))
    if refusal is None:
        assert plan(config).resource_pool_spec == {"actor_rollout_ref_pool": [8, 8], "critic_pool": [8, 8]}
        return
    with pytest.raises(PlacementError, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        plan(config)


def test_the_moe_recipes_virtual_pipeline_fits_its_48_layers(models):
    # 48 layers / PP=2 = 24 per stage, / VPP=2 = 12: megatron-core builds it; VPP=5 it would not.
    config = recipe(GRPO_30B_A3B, {**GRPO_30B_A3B_DEFAULTS, "actor_vpp_override": 5, "ref_vpp_override": 5}, 2,
                    str(models["Qwen3-30B-A3B"]))  # fmt: skip
    with pytest.raises(PlacementError, match=r"48 layers give each of 2 pipeline stages 24, which do not split into"):
        plan(config)
