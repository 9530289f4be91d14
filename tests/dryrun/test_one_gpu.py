"""The one-GPU demo's job (``verl-split demo --device cuda``), composed with verl 0.9.1's real config and checked by
verl's own checks, and its refusals. No GPU here: the jobs are composed, not run (``scripts/gpu_run.sh`` runs
them; ``--rehearse`` runs them on the CPU, ``tests/e2e/test_demo_e2e.py``).
"""

from __future__ import annotations

import pytest

from verl_split.core import compat
from verl_split.core.errors import VerlSplitError
from verl_split.dryrun import one_gpu
from verl_split.dryrun.assets import GPU_SHAPE, make_tiny_gpu_assets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.tools.demo import job_overrides
from verl_split.tools.hydra_config import compose_config

pytestmark = pytest.mark.unit

ON_09 = pytest.mark.skipif(compat.family_of(compat.installed_version()) != "0.9", reason="verl 0.9's config")
GPU = one_gpu.Device("0", "a GPU", 70.0, 80.0)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_tiny_gpu_assets(tmp_path_factory.mktemp("gpu_assets"))


def composed(assets, out, gpus: int):
    """The config main_ppo composes for one of the demo's runs on the GPU: stock on 1 logical GPU, split on 2."""
    recipe = dry_run_overrides(assets, 2, "gae", "v1", out, one_gpu.LOGICAL_GPUS)
    return compose_config("ppo_trainer", None, job_overrides(recipe, gpus, GPU, "gae"))


@ON_09
@pytest.mark.parametrize("gpus", [1, 2], ids=["stock", "split"])
def test_the_one_gpu_jobs_compose_and_pass_verls_own_config_checks(assets, tmp_path, gpus):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config = composed(assets, tmp_path, gpus)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)  # RolloutConfig.__post_init__'s checks
    omega_conf_to_dataclass(config.critic)
    assert config.trainer.device == "cuda" and config.trainer.n_gpus_per_node == gpus
    assert config.ray_kwargs.ray_init.num_gpus == one_gpu.LOGICAL_GPUS
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES == "0"
    for fsdp in (config.actor_rollout_ref.actor.fsdp_config, config.critic.fsdp):
        assert dict(fsdp.mixed_precision) == {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert config.actor_rollout_ref.rollout.dtype == "bfloat16"
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert config.critic.model.override_config.attn_implementation == "sdpa"
    # The same batch in both runs (written for the 2 logical GPUs), so the runs do the same work.
    assert config.data.train_batch_size == 4 * one_gpu.LOGICAL_GPUS


@ON_09
def test_the_split_job_plans_one_pool_a_logical_gpu(assets, tmp_path):
    from verl_split import placement

    plan = placement.plan_from_config(composed(assets, tmp_path, 2))
    assert plan.resource_pool_spec == {"actor_rollout_ref_pool": [1], "critic_pool": [1]}


def test_the_gpu_model_is_the_head_size_64_shape(assets):
    import json

    config = json.loads((assets.model / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == GPU_SHAPE.head_size == 64


def test_a_rehearsal_keeps_the_cpu_device_and_platform(assets, tmp_path):
    cpu = one_gpu.Device("0", "cpu", 0, 0, cuda=False)
    overrides = job_overrides(dry_run_overrides(assets, 2, "gae", "v1", tmp_path, 2), 2, cpu, "gae")
    assert "trainer.device=cpu" in overrides
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES='0'" in overrides
    env = one_gpu.environment(run_environment(tmp_path, {"CUDA_VISIBLE_DEVICES": "0"}), cpu)
    assert "VERL_PLATFORM" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_the_runs_use_verls_cuda_platform_and_leave_the_raylet_all_gpus(tmp_path):
    env = one_gpu.environment(run_environment(tmp_path, {"CUDA_VISIBLE_DEVICES": "3,4"}), GPU)
    assert env["VERL_PLATFORM"] == "nvidia" and env["VERL_SPLIT_CPU"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in env  # the workers get theirs from the job's runtime_env


@pytest.mark.parametrize(("shown", "device"), [(None, "0"), ("3,4", "3"), ("GPU-5e1c", "GPU-5e1c"), ("", "0")])
def test_the_job_runs_on_the_first_gpu_the_user_shows(shown, device):
    assert one_gpu.visible_id({} if shown is None else {"CUDA_VISIBLE_DEVICES": shown}) == device


@pytest.mark.parametrize("version", ["2.49.0", "2.59.0"])
def test_a_ray_that_cannot_put_two_logical_gpus_on_one_device_is_refused_naming_the_fix(version):
    with pytest.raises(VerlSplitError, match=r"Ray 2\.\d+\.0 cannot put two logical GPUs on one device.*ray>=2\.60"):
        one_gpu.check_ray(version)
    one_gpu.check_ray("2.60.0")


def test_the_installed_ray_can(monkeypatch):
    one_gpu.check_ray()  # the project's own environment pins a Ray that maps both slots onto one device


def test_without_a_gpu_the_check_names_cuda_and_the_cpu_demo():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(VerlSplitError, match=r"--device cuda: torch .* sees no CUDA GPU here; leave --device out"):
        one_gpu.check({})


def test_a_gpu_too_small_is_refused_before_anything_starts(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(one_gpu, "probe", lambda device: one_gpu.Device(device, "a small GPU", 4.0, 8.0))
    with pytest.raises(VerlSplitError, match=r"GPU 0 \(a small GPU, 4\.0 of 8\.0 GiB free\) is too small .* 5\.50 GiB"):
        one_gpu.check({}, family="0.9")


def test_a_verl_without_the_platform_registry_is_refused(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(VerlSplitError, match=r"checked on verl 0\.9 only; verl 0\.8 has none"):
        one_gpu.check({}, family="0.8")
