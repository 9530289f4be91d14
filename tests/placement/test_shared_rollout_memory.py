"""Shared rollout's memory estimate for a critic-pool GPU, and its refusal before Ray: plan and a run's planner."""

from __future__ import annotations

import json

import pytest

from verl_split.core.errors import PlacementError
from verl_split.placement import memory, plan_from_config
from verl_split.tools import cli

pytestmark = pytest.mark.unit

#: deepseek-llm-7b-chat's shape (its config.json's sizes): about 6.9B parameters.
DEEPSEEK_7B = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 30,
    "num_key_value_heads": 32,
    "vocab_size": 102400,
    "tie_word_embeddings": False,
}


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_7B))
    return tmp_path


def test_the_parameter_count_comes_from_config_json(model_dir):
    lm = memory.params_from_config(str(model_dir))
    assert 6.8e9 < lm < 7.0e9  # deepseek-llm-7b: 6.91B
    critic = memory.params_from_config(str(model_dir), value_head=True)
    assert lm - critic == pytest.approx(102400 * 4096 - 4096)  # the value head replaces the LM head
    assert memory.params_from_config("no/such-model") is None and memory.params_from_config(None) is None


def test_the_hugging_face_cache_is_read_without_a_download(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--org--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(DEEPSEEK_7B))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert memory.params_from_config("org/m") == memory.params_from_config(str(snapshot))


def critic_config(model_dir, **fsdp):
    return {
        "trainer": {"nnodes": 1, "n_gpus_per_node": 8},
        "actor_rollout_ref": {
            "rollout": {
                "tensor_model_parallel_size": 1,
                "gpu_memory_utilization": 0.4,
                "checkpoint_engine": {"update_weights_bucket_megabytes": 1024},
            }
        },
        "critic": {"model": {"path": str(model_dir)}, "fsdp": {"fsdp_size": -1, "model_dtype": "fp32", **fsdp}},
        "split_placement": {"placement": "halves", "shared_rollout": True},
    }


def test_the_estimate_adds_vllm_the_critic_state_the_push_buffers_and_the_contexts(model_dir):
    found = memory.estimate(critic_config(model_dir), critic_gpus=4, gpu_gb=80, critic_params=None)
    params = memory.params_from_config(str(model_dir), value_head=True)
    assert found.critic_state_gb == pytest.approx(params * 12 / 4 / memory.GIB)  # fp32 params + Adam, 4 shards
    assert found.push_gb == 2.0 and found.fixed_gb == 5.25 and found.vllm_fraction == 0.4
    assert found.fits() is True  # 32 + 19.3 + 2 + 3 of 80
    offloaded = memory.estimate(
        critic_config(model_dir, param_offload=True, optimizer_offload=True), 4, gpu_gb=80, critic_params=None
    )
    assert offloaded.critic_state_gb == 0


def test_a_run_that_cannot_fit_is_refused_before_ray(model_dir):
    # The planner a run calls in the launching process (placement_check) and in the TaskRunner.
    with pytest.raises(PlacementError) as exc:
        plan_from_config(critic_config(model_dir), "", gpu_gb=32)
    message = str(exc.value)
    assert "shared rollout does not fit a critic-pool GPU" in message
    assert "vLLM 0.4 x 32 GiB = 12.8 GiB" in message and "push buffers 2 x 1024 MB = 2.0 GiB" in message
    assert "critic.fsdp.param_offload=true" in message and "gpu_memory_utilization (at most" in message
    # With the critic offloaded it fits, and the plan says how much it takes.
    plan = plan_from_config(critic_config(model_dir, param_offload=True, optimizer_offload=True), "", gpu_gb=32)
    assert any("= 20.1 of 32 GiB" in note for note in plan.notes), plan.notes


def test_an_unknown_gpu_is_not_refused_but_estimated(model_dir, monkeypatch):
    monkeypatch.setattr(memory, "detect_gpu_gb", lambda: None)  # no nvidia-smi: a CPU dry run, a laptop
    plan = plan_from_config(critic_config(model_dir), "")
    (note,) = [n for n in plan.notes if n.startswith("shared rollout memory")]
    assert "vLLM 0.4 x M +" in note and " of " not in note.split("CUDA/NCCL")[1]


def test_verl_split_plan_shows_and_checks_the_estimate(capsys):
    base = ["plan", "--nnodes", "1", "--n-gpus-per-node", "8", "--shared-rollout", "--critic-params", "7B"]
    assert cli.main([*base, "--gpu-memory-gb", "80"]) == 0
    out = capsys.readouterr().out
    assert "note: shared rollout memory per critic-pool GPU: vLLM 0.5 x 80 GiB = 40.0 GiB + critic 7.00B params" in out
    assert "= 68.8 of 80 GiB" in out
    assert cli.main([*base, "--gpu-memory-gb", "40"]) == 2
    assert "shared rollout does not fit a critic-pool GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's usage error, naming the forms it takes
        cli.main([*base[:-2], "--critic-params", "lots"])
    assert "is not a parameter count such as 7B" in capsys.readouterr().err
