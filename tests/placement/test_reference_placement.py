"""The reference on the critic's pool (``actor,rollout:0-5;critic,ref:6-7``): planned, refused where verl keeps
it in the actor's worker, counted in the memory check of the pool that holds it."""

from __future__ import annotations

import json

import pytest

from verl_split.core.errors import PlacementError
from verl_split.placement import Cluster, Requirements, memory, plan_from_config, plan_placement

pytestmark = pytest.mark.unit

APART = "actor,rollout:0-5;critic,ref:6-7"
EIGHT = Cluster(nnodes=1, n_gpus_per_node=8)
#: A 1.5B-parameter decoder's config.json (Qwen2.5-1.5B's sizes).
QWEN_1_5B = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


def job(placement: str = APART, use_v1: bool = False, kl_loss: bool = True, **extra) -> dict:
    """A PPO job (GAE, a critic) on 8 GPUs; ``use_v1=False``: RayPPOTrainer."""
    config = {
        "trainer": {"nnodes": 1, "n_gpus_per_node": 8, "use_v1": use_v1},
        "algorithm": {"adv_estimator": "gae", "use_kl_in_reward": False},
        "actor_rollout_ref": {"actor": {"use_kl_loss": kl_loss}, "model": {}},
        "split_placement": {"placement": placement},
    }
    for key, value in extra.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return config


def test_the_reference_goes_to_the_critics_pool_on_ray_ppo_trainer():
    plan = plan_from_config(job(), "")
    assert plan.mapping == {
        "actor": "actor_rollout_ref_pool",
        "rollout": "actor_rollout_ref_pool",
        "ref": "critic_pool",
        "critic": "critic_pool",
    }
    assert plan.resource_pool_spec == {"actor_rollout_ref_pool": [6], "critic_pool": [2]}
    assert plan.pool("critic_pool").roles == ("ref", "critic")
    assert any("reference runs in a worker group of its own on critic_pool" in note for note in plan.notes)


def test_left_out_or_in_the_actors_group_the_reference_follows_the_actor():
    for text in ("actor,rollout:0-5;critic:6-7", "actor,rollout,ref:0-5;critic:6-7", "6:2"):
        plan = plan_from_config(job(text), "")
        assert plan.mapping["ref"] == plan.mapping["actor"] == "actor_rollout_ref_pool", text
        assert not any("reference runs" in note for note in plan.notes)


def test_verls_v1_trainer_is_refused_the_layout_with_what_to_do():
    with pytest.raises(PlacementError) as refused:
        plan_from_config(job(use_v1=True), "")
    message = str(refused.value)
    assert "'ref' is in group 'critic,ref:6-7', apart from the actor's 'actor,rollout:0-5'" in message
    assert "v1 trainer" in message and "PPOTrainer._setup" in message and "trainer.use_v1=false" in message


def test_the_installed_verls_default_trainer_is_read_from_its_own_config():
    from omegaconf import OmegaConf

    from verl_split.tools.plan import compose_config

    # 4 + 4 GPUs: verl's default batch (1024 rows, mini-batches of 256) splits over both pools.
    config = compose_config(
        "ppo_trainer", None, ["trainer.n_gpus_per_node=8", "actor_rollout_ref.actor.use_kl_loss=true"]
    )
    layout = "actor,rollout:0-3;critic,ref:4-7"
    with pytest.raises(PlacementError, match="v1 trainer"):
        plan_from_config(config, layout)  # verl 0.9.1's default: trainer.use_v1=true
    OmegaConf.update(config, "trainer.use_v1", False)
    assert plan_from_config(config, layout).mapping["ref"] == "critic_pool"


@pytest.mark.parametrize("lora", [{"actor_rollout_ref.model.lora_rank": 8}, {"actor_rollout_ref.model.lora.rank": 16}])
def test_lora_is_refused_the_layout_since_the_reference_is_the_actors_model(lora):
    with pytest.raises(PlacementError, match=r"trains LoRA \(rank \d+\).*ref_in_actor.*Move 'ref' into the actor's"):
        plan_from_config(job(**lora), "")


def test_a_run_without_a_reference_is_told_to_drop_it():
    with pytest.raises(PlacementError, match="this run has no reference model.*Drop 'ref' from that group"):
        plan_from_config(job(kl_loss=False), "")
    # A KL penalty in the reward needs the reference too.
    plan = plan_from_config(job(kl_loss=False, **{"algorithm.use_kl_in_reward": True}), "")
    assert plan.mapping["ref"] == "critic_pool"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("actor,rollout:0-3;ref:4-5;critic:6-7", "'ref' is in group 'ref:4-5', which holds no critic"),
        ("actor,rollout:0-5;ref:6-7", "'ref' is in group 'ref:6-7', which holds no critic"),
        ("actor,rollout:0-5;critic:6-7;ref:6", "GPU 6 is in two groups"),
        ("actor,rollout,ref:0-5;critic,ref:6-7", "role 'ref' is in two groups"),
    ],
)
def test_the_reference_goes_nowhere_but_beside_the_actor_or_the_critic(text, why):
    with pytest.raises(PlacementError, match=why.replace("(", r"\(").replace(")", r"\)")):
        plan_placement(text, EIGHT, Requirements())


def test_without_a_config_the_layout_is_planned_and_the_v1_caveat_noted():
    plan = plan_placement(APART, EIGHT, Requirements())
    assert plan.mapping["ref"] == "critic_pool"
    assert any("v1 trainer keeps it in the actor's worker" in note for note in plan.notes)


@pytest.fixture
def actor_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN_1_5B))
    return tmp_path


def shared_job(actor_model, placement: str) -> dict:
    return job(
        placement,
        **{
            "split_placement.shared_rollout": True,
            "actor_rollout_ref.model.path": str(actor_model),
            "critic.model.path": str(actor_model),
            "actor_rollout_ref.rollout.gpu_memory_utilization": 0.4,
        },
    )


def test_the_memory_check_counts_the_reference_on_the_pool_that_holds_it(actor_model):
    params = memory.params_from_config(str(actor_model))
    ref_gb = params * 4 / 2 / memory.GIB  # fp32 parameters over the critic pool's 2 GPUs, no optimizer
    apart = plan_from_config(shared_job(actor_model, APART), "", gpu_gb=141)
    together = plan_from_config(shared_job(actor_model, "actor,rollout:0-5;critic:6-7"), "", gpu_gb=141)
    critic_apart, actor_apart = (n for n in apart.notes if n.startswith("shared rollout"))
    critic_together, actor_together = (n for n in together.notes if n.startswith("shared rollout"))
    assert "ref " in critic_apart and "ref " not in actor_apart
    assert "ref " not in critic_together and "ref " in actor_together
    found = memory.estimate(shared_job(actor_model, APART), 2, 141, None, reference=True)
    assert [s.role for s in found.states] == ["critic", "ref"]
    assert found.states[1].gb == pytest.approx(ref_gb)
    # The reference's 1.5B fp32 parameters over 2 GPUs (2.9 GiB) tip a 32 GiB GPU, which holds the rest (critic 8.6
    # + vLLM 12.8 + push 4 + contexts 5.25 = 30.7 GiB): refused, its offload key named.
    with pytest.raises(PlacementError, match=r"actor_rollout_ref\.ref\.fsdp_config\.param_offload=true"):
        plan_from_config(shared_job(actor_model, APART), "", gpu_gb=32)
    plan_from_config(shared_job(actor_model, "actor,rollout:0-5;critic:6-7"), "", gpu_gb=32)
