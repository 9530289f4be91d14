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

import functools
import json
import string

import pytest
from omegaconf import OmegaConf

from verl_split import placement as planner
from verl_split.core.errors import PlacementError
from verl_split.tools.hydra_config import compose_config

pytestmark = pytest.mark.unit

QWEN3_8B = {"hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32, "num_hidden_layers": 36,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False}  # fmt: skip
QWEN3_30B_A3B = {"hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                 "num_attention_heads": 32, "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128,
                 "vocab_size": 151936, "tie_word_embeddings": False}  # fmt: skip

#: examples/ppo_trainer/run_qwen3_8b_megatron.sh: DATA, MODEL, ACTOR, ROLLOUT, REF, CRITIC, TRAINER, EXTRA.
PPO_8B = """
algorithm.adv_estimator=gae
data.train_batch_size=${train_batch_size}
data.max_prompt_length=${max_prompt_length}
data.max_response_length=${max_response_length}
data.filter_overlong_prompts=True
data.truncation='error'
actor_rollout_ref.model.path=$MODEL_PATH
actor_rollout_ref.model.use_remove_padding=True
actor_rollout_ref.actor.optim.lr=${actor_lr}
actor_rollout_ref.actor.ppo_mini_batch_size=${ppo_mini_batch_size}
actor_rollout_ref.actor.use_dynamic_bsz=True
actor_rollout_ref.actor.ppo_max_token_len_per_gpu=${ppo_max_token_len_per_gpu}
actor_rollout_ref.actor.entropy_coeff=${entropy_coeff}
actor_rollout_ref.actor.megatron.tensor_model_parallel_size=${actor_tp}
actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=${actor_pp}
actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.tensor_model_parallel_size=${rollout_tp}
actor_rollout_ref.rollout.gpu_memory_utilization=${rollout_gpu_mem_util}
actor_rollout_ref.rollout.n=${rollout_n}
actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=${ppo_max_token_len_per_gpu}
actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True
actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=${ppo_max_token_len_per_gpu}
actor_rollout_ref.ref.megatron.tensor_model_parallel_size=${actor_tp}
actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=${actor_pp}
critic.model.path=$CRITIC_MODEL_PATH
critic.model.use_remove_padding=True
critic.optim.lr=${critic_lr}
critic.use_dynamic_bsz=True
critic.ppo_max_token_len_per_gpu=${ppo_max_token_len_per_gpu}
critic.megatron.tensor_model_parallel_size=${critic_tp}
critic.megatron.pipeline_model_parallel_size=${critic_pp}
trainer.balance_batch=True
trainer.critic_warmup=0
trainer.n_gpus_per_node=${NGPUS_PER_NODE}
trainer.nnodes=${NNODES}
trainer.save_freq=${save_freq}
trainer.test_freq=${test_freq}
trainer.total_epochs=${total_epochs}
model_engine=megatron
"""
PPO_8B_DEFAULTS = {
    "train_batch_size": 1024, "ppo_mini_batch_size": 256, "max_prompt_length": 1024, "max_response_length": 2048,
    "ppo_max_token_len_per_gpu": 24576, "actor_lr": "1e-6", "critic_lr": "1e-5", "entropy_coeff": 0, "actor_tp": 2,
    "actor_pp": 2, "critic_tp": 2, "critic_pp": 2, "rollout_tp": 2, "rollout_gpu_mem_util": 0.6, "rollout_n": 1,
    "total_epochs": 15, "save_freq": 20, "test_freq": 5, "NGPUS_PER_NODE": 8,
}  # fmt: skip

#: examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh: ALGORITHM, DATA, MODEL, ACTOR, ROLLOUT, REF, TRAINER,
#: EXTRA (INFER_BACKEND=vllm; the reward manager's and the fused kernels' lines set nothing the planner reads).
GRPO_30B_A3B = """
algorithm.adv_estimator=grpo
algorithm.use_kl_in_reward=False
algorithm.kl_ctrl.kl_coef=0.0
data.train_batch_size=${train_batch_size}
data.max_prompt_length=${max_prompt_length}
data.max_response_length=${max_response_length}
actor_rollout_ref.model.path=$MODEL_PATH
actor_rollout_ref.model.use_remove_padding=True
actor_rollout_ref.actor.ppo_mini_batch_size=${ppo_mini_batch_size}
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=${actor_ppo_micro_batch_size_per_gpu}
actor_rollout_ref.actor.use_dynamic_bsz=True
actor_rollout_ref.actor.ppo_max_token_len_per_gpu=${ppo_max_token_len_per_gpu}
actor_rollout_ref.actor.use_kl_loss=False
actor_rollout_ref.actor.megatron.tensor_model_parallel_size=${actor_tp}
actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=${actor_pp}
actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=${actor_vpp_override}
actor_rollout_ref.actor.megatron.expert_model_parallel_size=${actor_ep}
actor_rollout_ref.actor.megatron.context_parallel_size=${actor_cp}
actor_rollout_ref.actor.megatron.param_offload=${all_offload}
actor_rollout_ref.actor.megatron.optimizer_offload=${all_offload}
actor_rollout_ref.actor.megatron.grad_offload=${all_offload}
actor_rollout_ref.actor.megatron.use_mbridge=True
actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.tensor_model_parallel_size=${infer_tp}
actor_rollout_ref.rollout.gpu_memory_utilization=${rollout_gpu_mem_util}
actor_rollout_ref.rollout.n=${rollout_n}
actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=${rollout_log_prob_micro_batch_size_per_gpu}
actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=${ref_log_prob_micro_batch_size_per_gpu}
actor_rollout_ref.ref.megatron.tensor_model_parallel_size=${ref_tp}
actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=${ref_pp}
actor_rollout_ref.ref.megatron.virtual_pipeline_model_parallel_size=${ref_vpp_override}
actor_rollout_ref.ref.megatron.expert_model_parallel_size=${ref_ep}
actor_rollout_ref.ref.megatron.context_parallel_size=${ref_cp}
actor_rollout_ref.ref.megatron.param_offload=${all_offload}
trainer.balance_batch=True
trainer.n_gpus_per_node=${NGPUS_PER_NODE}
trainer.nnodes=${NNODES}
model_engine=megatron
actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096
+actor_rollout_ref.rollout.moe_tensor_parallel_size=${gen_moe_tp}
actor_rollout_ref.rollout.expert_parallel_size=${gen_moe_ep}
"""
GRPO_30B_A3B_DEFAULTS = {
    "train_batch_size": 512, "ppo_mini_batch_size": 16, "max_prompt_length": 2048, "max_response_length": 8192,
    "ppo_max_token_len_per_gpu": 30720, "actor_ppo_micro_batch_size_per_gpu": 2, "actor_tp": 4, "actor_pp": 2,
    "actor_vpp_override": 2, "actor_ep": 2, "actor_cp": 1, "ref_tp": 4, "ref_pp": 2, "ref_vpp_override": 2,
    "ref_ep": 2, "ref_cp": 1, "all_offload": True, "infer_tp": 4, "gen_moe_tp": 2, "gen_moe_ep": 2,
    "rollout_gpu_mem_util": 0.6, "rollout_n": 8, "rollout_log_prob_micro_batch_size_per_gpu": 4,
    "ref_log_prob_micro_batch_size_per_gpu": 4, "NGPUS_PER_NODE": 8,
}  # fmt: skip
#: The same MoE recipe run with a critic, as a user of split placement would add one (the actor's mesh).
WITH_CRITIC = """
algorithm.adv_estimator=gae
critic.model.path=$MODEL_PATH
critic.use_dynamic_bsz=True
critic.megatron.tensor_model_parallel_size=${actor_tp}
critic.megatron.pipeline_model_parallel_size=${actor_pp}
critic.megatron.virtual_pipeline_model_parallel_size=${actor_vpp_override}
critic.megatron.expert_model_parallel_size=${actor_ep}
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for name, shape in (("Qwen3-8B", QWEN3_8B), ("Qwen3-30B-A3B", QWEN3_30B_A3B)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(shape))
    return root


def recipe(lines: str, defaults: dict, nnodes: int, model: str, *extra: str) -> object:
    values = {**defaults, "NNODES": nnodes, "MODEL_PATH": model, "CRITIC_MODEL_PATH": model}
    overrides = [string.Template(line).substitute(values) for line in lines.split()]
    base = _base()
    absent = object()

    def missing(override: str) -> bool:
        key = override.split("=")[0]
        return "." in key and not key.startswith("+") and OmegaConf.select(base, key, default=absent) is absent

    overrides = [f"+{o}" if missing(o) else o for o in overrides]
    return compose_config("ppo_trainer", None, [*overrides, *extra])


@functools.cache
def _base():
    """The installed verl's Megatron config: a key verl's main has and it lacks gets hydra's ``+``."""
    return compose_config("ppo_trainer", None, ["model_engine=megatron"])


def plan(config):
    return planner.plan_from_config(config, env_value="")


@pytest.mark.parametrize("nnodes", [1, 2, 4])
def test_the_ppo_recipe_plans_at_its_defaults(models, nnodes):
    config = recipe(PPO_8B, PPO_8B_DEFAULTS, nnodes, str(models / "Qwen3-8B"))
    halves = plan(config)  # the default placement: one node in halves, several in two node groups
    side = 4 if nnodes == 1 else 8 * nnodes // 2
    assert [halves.pool(name).size for name in ("actor_rollout_ref_pool", "critic_pool")] == [side, side]
    stock = plan(recipe(PPO_8B, PPO_8B_DEFAULTS, nnodes, str(models / "Qwen3-8B"), "+split_placement.placement=all"))
    # verl's own layout: the critic shares the actor's processes, hence its mesh (here the same TP=2 x PP=2).
    assert any("the critic shares global_pool's processes with the actor" in note for note in stock.notes)


def test_the_ppo_recipe_refuses_a_pool_its_model_parallel_size_does_not_divide(models):
    config = recipe(PPO_8B, PPO_8B_DEFAULTS, 1, str(models / "Qwen3-8B"), "+split_placement.placement=6:2")
    with pytest.raises(PlacementError, match=r"actor_rollout_ref_pool has 6 GPUs, which is not divisible by .*=4"):
        plan(config)


def test_the_ppo_recipe_with_a_bigger_actor_mesh_than_the_critics(models):
    # ACTOR_TP=4 (ACTOR_PP=2): an 8-GPU actor replica beside the critic's TP=2 x PP=2.
    bigger = {**PPO_8B_DEFAULTS, "actor_tp": 4}
    path = str(models / "Qwen3-8B")
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
    config = recipe(GRPO_30B_A3B, GRPO_30B_A3B_DEFAULTS, nnodes, str(models / "Qwen3-30B-A3B"))
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
    assert plan(recipe(GRPO_30B_A3B, GRPO_30B_A3B_DEFAULTS, 1, str(models / "Qwen3-30B-A3B"), fixed))


@pytest.mark.parametrize(("nnodes", "refusal"), [(2, "(8 GPUs) is not a multiple of"), (4, None)])
def test_the_moe_recipe_with_a_critic_splits_from_four_nodes(models, nnodes, refusal):
    # halves gives each side half the GPUs; the experts' 16 GPUs then need 4 nodes.
    config = recipe(GRPO_30B_A3B + WITH_CRITIC, GRPO_30B_A3B_DEFAULTS, nnodes, str(models / "Qwen3-30B-A3B"))
    if refusal is None:
        assert plan(config).resource_pool_spec == {"actor_rollout_ref_pool": [8, 8], "critic_pool": [8, 8]}
        return
    with pytest.raises(PlacementError, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        plan(config)


def test_the_moe_recipes_virtual_pipeline_fits_its_48_layers(models):
    # 48 layers / PP=2 = 24 per stage, / VPP=2 = 12: megatron-core builds it; VPP=5 it would not.
    config = recipe(GRPO_30B_A3B, {**GRPO_30B_A3B_DEFAULTS, "actor_vpp_override": 5, "ref_vpp_override": 5}, 2,
                    str(models / "Qwen3-30B-A3B"))  # fmt: skip
    with pytest.raises(PlacementError, match=r"48 layers give each of 2 pipeline stages 24, which do not split into"):
        plan(config)
