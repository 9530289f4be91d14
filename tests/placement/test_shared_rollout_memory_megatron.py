"""Shared rollout's memory with Megatron, and on the actor pool: the estimates and their refusals before Ray.

A Megatron critic keeps the bf16 parameters and the fp32 grad buffer of its TP x PP shard, and the distributed
optimizer's 12 bytes a parameter spread over its pool (``placement.train_state``): several times what the FSDP
formula gives. Every actor-pool GPU holds the push's two buckets beside the actor's state.
"""

from __future__ import annotations

import json

import pytest

from verl_split.core.errors import PlacementError
from verl_split.placement import memory, plan_from_config
from verl_split.tools import cli

pytestmark = pytest.mark.unit

GIB = memory.GIB
#: A mixture of experts' shape: 4 routed experts per layer (the expert weights are sharded by EP, not TP).
MOE = {"hidden_size": 1024, "intermediate_size": 4096, "moe_intermediate_size": 1024, "num_experts": 4,
       "num_attention_heads": 16, "num_hidden_layers": 8, "num_key_value_heads": 16, "vocab_size": 32000}  # fmt: skip


def megatron_critic(**megatron):
    return {
        "actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 0.5}},
        "critic": {"strategy": "megatron", "megatron": {"tensor_model_parallel_size": 2, **megatron}},
    }


def test_a_megatron_critic_keeps_its_shard_its_grads_and_a_share_of_adam():
    found = memory.estimate(megatron_critic(), critic_gpus=4, gpu_gb=80, critic_params=7e9)
    # bf16 params (2 B) and fp32 grads (4 B) of a 1/2 shard, Adam's 12 B over 4 GPUs: 6 B a parameter.
    assert found.critic_state_gb == pytest.approx(7e9 * (6 / 2 + 12 / 4) / GIB)
    text = found.describe()
    assert "critic 7.00B params (Megatron TP=2 x PP=1 x CP=1: bf16 parameters resident, fp32 grads resident" in text
    assert "Adam 12 B over 4 GPUs resident)" in text


@pytest.mark.parametrize(
    ("megatron", "bytes_per_param"),
    [
        ({"param_offload": True}, 12 / 4),  # grads go with the parameters (verl's engine)
        ({"optimizer_offload": True}, 6 / 2),
        ({"param_offload": True, "optimizer_offload": True}, 0),
        ({"use_distributed_optimizer": False}, 6 / 2 + 12 / 2),  # each rank holds its shard's optimizer
        ({"override_ddp_config": {"grad_reduce_in_fp32": False}}, 4 / 2 + 12 / 4),  # bf16 grads
    ],
)
def test_what_offloading_and_the_optimizer_change(megatron, bytes_per_param):
    found = memory.estimate(megatron_critic(**megatron), critic_gpus=4, gpu_gb=80, critic_params=7e9)
    assert found.critic_state_gb == pytest.approx(7e9 * bytes_per_param / GIB)


def test_routed_experts_are_sharded_by_expert_parallelism(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MOE))
    cfg = megatron_critic(expert_model_parallel_size=2)
    cfg["critic"]["model"] = {"path": str(tmp_path)}
    found = memory.estimate(cfg, critic_gpus=4, gpu_gb=80, critic_params=None)
    (state,) = found.states
    experts = 8 * 3 * 1024 * 1024 * 4  # layers x 3 matrices x hidden x moe_intermediate x experts
    dense = state.params - experts
    # ETP unset is TP=2: experts over ETP x EP = 4, the rest over TP = 2.
    assert found.critic_state_gb == pytest.approx(((dense / 2 + experts / 4) * 6 + state.params * 12 / 4) / GIB)


def test_the_fsdp_formula_would_pass_a_70b_megatron_critic_that_does_not_fit():
    # The research memo's case: 70B at TP=8 over 64 GPUs, vLLM at half of an 80 GiB GPU.
    fsdp = {"actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 0.5}}, "critic": {"fsdp": {}}}
    assert memory.estimate(fsdp, 64, 80, 70e9).fits() is True
    found = memory.estimate(megatron_critic(tensor_model_parallel_size=8), 64, 80, 70e9)
    assert found.critic_state_gb == pytest.approx(70e9 * (6 / 8 + 12 / 64) / GIB)  # 61 GiB, not 12
    assert found.fits() is False
    with pytest.raises(PlacementError) as exc:
        memory.check(found, "placement='halves'")
    message = str(exc.value)
    assert "shared rollout does not fit a critic-pool GPU" in message
    assert "critic.megatron.param_offload=true and critic.megatron.optimizer_offload=true" in message


def shared_run(tmp_path, actor_megatron=None, **top):
    """A shared-rollout run on one node of 8 (halves): a 7B-ish actor whose config.json is in ``tmp_path``."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 4096,
                "intermediate_size": 11008,
                "num_attention_heads": 32,
                "num_hidden_layers": 30,
                "vocab_size": 102400,
            }
        )  # fmt: skip
    )
    actor = {"strategy": "megatron", "megatron": actor_megatron} if actor_megatron is not None else {}
    cfg = {
        "trainer": {"nnodes": 1, "n_gpus_per_node": 8},
        "actor_rollout_ref": {
            "model": {"path": str(tmp_path)},
            "actor": actor,
            "rollout": {"tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.4},
        },
        "critic": {"fsdp": {"param_offload": True, "optimizer_offload": True}},
        "split_placement": {"placement": "halves", "shared_rollout": True},
    }
    cfg["actor_rollout_ref"]["actor"].update(top)
    return cfg


def test_the_actor_pool_gpus_hold_the_push_beside_the_actor(tmp_path):
    plan = plan_from_config(shared_run(tmp_path), "", gpu_gb=80)
    (note,) = [n for n in plan.notes if n.startswith("shared rollout push memory per actor-pool GPU")]
    # FSDP's fp32 parameters and Adam over the 4 actor GPUs, two 2048 MB buckets, two processes' contexts.
    assert "actor 6.91B params / 4 shards, parameters resident, optimizer resident: 19.3 GiB" in note
    assert "push buffers 2 x 2048 MB = 4.0 GiB + CUDA/NCCL 3.5 GiB = 26.8 of 80 GiB" in note
    with pytest.raises(PlacementError) as exc:
        plan_from_config(shared_run(tmp_path), "", gpu_gb=24)
    message = str(exc.value)
    assert "shared rollout's weight push does not fit an actor-pool GPU" in message
    assert "(NCCLCheckpointEngine.prepare in verl/checkpoint_engine/nccl_checkpoint_engine.py)" in message
    assert "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true" in message


def test_under_the_late_join_the_actor_pool_s_awake_vllm_is_counted_beside_the_push(tmp_path, monkeypatch):
    """VERL_SPLIT_LATE_JOIN=on with defer_critic: the push comes while the actor pool's vLLM generates, so its
    0.4 x 80 GiB is resident with the actor's state and the buckets (code_review_3.md item 4: it was counted
    asleep)."""
    monkeypatch.setenv("VERL_SPLIT", "1")
    monkeypatch.setenv("VERL_SPLIT_LATE_JOIN", "on")
    plan = plan_from_config(shared_run(tmp_path), "", gpu_gb=80)
    (note,) = [n for n in plan.notes if n.startswith("shared rollout push memory per actor-pool GPU")]
    assert note.startswith("shared rollout push memory per actor-pool GPU: vLLM 0.4 x 80 GiB = 32.0 GiB + actor")
    assert "= 58.8 of 80 GiB" in note  # the 26.8 GiB asleep, plus vLLM's 32
    with pytest.raises(PlacementError) as exc:
        plan_from_config(shared_run(tmp_path), "", gpu_gb=40)  # fits asleep (26.8 of 40), not awake
    assert "and the actor pool's vLLM, awake" in str(exc.value) and "VERL_SPLIT_LATE_JOIN=off" in str(exc.value)
    monkeypatch.setenv("VERL_SPLIT_LATE_JOIN", "auto")  # off on GPUs: the push comes while vLLM sleeps
    assert plan_from_config(shared_run(tmp_path), "", gpu_gb=40)


def test_a_megatron_actors_export_loads_its_parameters_even_when_offloaded(tmp_path):
    cfg = shared_run(tmp_path, {"tensor_model_parallel_size": 4, "param_offload": True, "optimizer_offload": True})
    plan = plan_from_config(cfg, "", gpu_gb=80)
    (note,) = [n for n in plan.notes if n.startswith("shared rollout push memory")]
    # get_per_tensor_param loads the bf16 parameters; the grads and the optimizer stay on the CPU.
    assert "bf16 parameters resident, fp32 grads offloaded, Adam 12 B over 4 GPUs offloaded): 3.2 GiB" in note


def test_verl_split_plan_checks_the_actor_pool_with_actor_params(capsys):
    base = ["plan", "--nnodes", "1", "--n-gpus-per-node", "8", "--shared-rollout", "--critic-params", "1B"]
    assert cli.main([*base, "--actor-params", "7B", "--gpu-memory-gb", "80"]) == 0
    out = capsys.readouterr().out
    assert "note: shared rollout push memory per actor-pool GPU: actor 7.00B params / 4 shards" in out
    assert cli.main([*base, "--actor-params", "7B", "--gpu-memory-gb", "26"]) == 2
    assert "shared rollout's weight push does not fit an actor-pool GPU" in capsys.readouterr().err
    assert cli.main([*base, "--gpu-memory-gb", "26"]) == 0  # the actor's size unknown: shown, not refused
    assert "actor state unknown (no config.json for actor_rollout_ref.model.path here; pass --actor-params)" in (
        capsys.readouterr().out
    )
