"""``verl-split advise``'s memory rule: a pool that cannot hold its models is refused, with the reason (issue 34).

The counts are the planner's (``placement.train_state``); the rule adds each pool's peak: a role's update with
its whole state loaded (FSDP's gradients too), and generation with vLLM's share.
"""

from __future__ import annotations

import json

import pytest
from support.advise_profiles import NEAR_LINEAR, run_file
from support.megatron_recipes import PPO_8B, PPO_8B_DEFAULTS, recipe
from test_advise_log_config import QWEN3_8B, REAL_LOG, console_of, fsdp_recipe

from verl_split.placement import Cluster
from verl_split.placement.memory import CONTEXT_GB_PER_PROCESS
from verl_split.placement.train_state import GIB
from verl_split.tools.advise import advise
from verl_split.tools.advise.logs import read_log
from verl_split.tools.advise.pool_memory import memory_rule, params_from_name
from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

SEVEN_B = 7e9


def stock(tmp_path):
    return run_file(tmp_path / "stock.jsonl", NEAR_LINEAR, n=8)


def test_a_7b_critic_with_adam_does_not_fit_one_80_gib_gpu(tmp_path):
    advice = advise([stock(tmp_path)], Cluster(1, 8), gpu_gb=80, model_params=SEVEN_B, critic_params=SEVEN_B)
    refused = dict(advice.rejected)
    # fp32 parameters 4 B + gradients 4 B + Adam's moments 8 B = 16 B a parameter: 104 GiB on one GPU.
    assert "the critic pool's GPUs cannot hold its models: 106.1 GiB per GPU at the critic's update" in refused["7:1"]
    (critic,) = [n for n in advice.memory.needs(7, 1, False) if n.pool == "critic pool"]
    assert critic.need_gb == pytest.approx(16 * SEVEN_B / GIB + CONTEXT_GB_PER_PROCESS)
    offered = {name for c in advice.candidates for name in (c.placement, *c.same_prediction_as)}
    assert "7:1" not in offered and "6:2" in offered  # two GPUs: 53 GiB each


def test_without_the_gpus_size_nothing_is_refused_and_the_report_says_so(tmp_path, capsys):
    advice = advise([stock(tmp_path)], Cluster(1, 8), model_params=SEVEN_B, critic_params=SEVEN_B)
    assert not any("cannot hold" in why for _, why in advice.rejected)
    sizes = ["--actor-params", "7B", "--critic-params", "7B"]
    code = main(["advise", "--verbose", str(stock(tmp_path)), "--nnodes", "1", "--n-gpus-per-node", "8", *sizes])
    assert code == 0 and "not checked: pass --gpu-memory" in capsys.readouterr().out


def test_a_layout_a_run_trained_on_is_never_refused(tmp_path):
    advice = advise([stock(tmp_path)], Cluster(1, 8), gpu_gb=20, model_params=SEVEN_B, critic_params=SEVEN_B)
    assert [c.placement for c in advice.candidates] == ["all"]  # it ran on 8 GPUs; every split needs more
    assert all("cannot hold its models" in why for _, why in advice.rejected)


def test_offload_lowers_what_the_other_roles_keep_beside_an_update():
    base = {"actor_rollout_ref": {"model": {"path": "m-7b"}}, "critic": {"model": {"path": "c-7b"}}}
    offloaded = json.loads(json.dumps(base))
    offloaded["actor_rollout_ref"]["actor"] = {"fsdp_config": {"param_offload": True, "optimizer_offload": True}}
    offloaded["critic"]["fsdp"] = {"param_offload": True, "optimizer_offload": True}
    plain = memory_rule(base, 80.0).needs(8, 8, True)[0]
    less = memory_rule(offloaded, 80.0).needs(8, 8, True)[0]
    assert less.need_gb < plain.need_gb
    # The actor's own update loads its state back: alone on its pool, offload does not lower its peak.
    assert memory_rule(offloaded, 80.0).needs(4, 4, False)[1] == memory_rule(base, 80.0).needs(4, 4, False)[1]


def test_megatron_state_is_sharded_by_the_mesh_and_the_distributed_optimizer():
    rule = memory_rule(read_log(REAL_LOG).config, 80.0)
    assert (rule.actor_params, rule.critic_params) == (SEVEN_B, SEVEN_B)  # deepseek-llm-7b-chat: from its name
    critic = rule.needs(4, 4, False)[1]
    # TP=4: bf16 parameters 2/4 + fp32 grads 4/4 + Adam 12 B over the pool's 4 GPUs.
    assert critic.need_gb == pytest.approx((2 / 4 + 4 / 4 + 12 / 4) * SEVEN_B / GIB + CONTEXT_GB_PER_PROCESS)


def test_sizes_from_names():
    assert params_from_name("/root/models/deepseek-llm-7b-chat") == 7e9
    assert params_from_name("Qwen/Qwen2.5-0.5B-Instruct") == 0.5e9
    assert params_from_name("Qwen/Qwen3-30B-A3B") == 30e9
    assert params_from_name("/models/critic") is None


@pytest.fixture(scope="module")
def qwen3_8b(model_folder):
    return str(model_folder("Qwen3-8B", QWEN3_8B))


@pytest.mark.parametrize("engine", ["fsdp", "megatron"])
@pytest.mark.parametrize("nnodes", [1, 2])
def test_recipes_offer_only_layouts_that_fit_80_gib(tmp_path, qwen3_8b, engine, nnodes):
    config = fsdp_recipe(nnodes, qwen3_8b) if engine == "fsdp" else recipe(PPO_8B, PPO_8B_DEFAULTS, nnodes, qwen3_8b)
    advice = advise([console_of(tmp_path / "run.log", config, 8 * nnodes)], Cluster(nnodes, 8), gpu_gb=80)
    assert "config.json" in advice.memory.params_source
    for c in advice.candidates:
        p = c.prediction
        for need in advice.memory.needs(p.actor_gpus, p.critic_gpus, p.colocated):
            assert need.need_gb is not None and need.need_gb <= 80
    refused = [why for _, why in advice.rejected if "cannot hold its models" in why]
    for why in refused:  # each with the pool, the moment and the sizes
        assert "GiB per GPU at the" in why and "against 80 GiB (--gpu-memory)" in why


def test_generation_gives_the_room_left_for_vllm(tmp_path, capsys):
    path = console_of(tmp_path / "run.log", read_log(REAL_LOG).config, 4)
    code = main(["advise", "--verbose", str(path), "--nnodes", "1", "--n-gpus-per-node", "4", "--gpu-memory", "40"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    # 7B, Megatron TP=4 on 4 GPUs: actor 29.3 + critic 29.3 + reference 3.3 GiB resident, 64 GiB: no room on a
    # 40 GiB GPU for the job's vLLM share (0.2); the run trained there, so the layout is kept and the note says it.
    assert "set actor_rollout_ref.rollout.gpu_memory_utilization to at most 0.00 there (the job has 0.2)" in out
