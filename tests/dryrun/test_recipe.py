"""The CPU dry run's recipe (verl_split/dryrun/recipe.py): the Hydra overrides for each verl family
(the e2e tests run them) and the environment main_ppo runs in. No verl run."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_split.dryrun.assets import TinyAssets
from verl_split.dryrun.recipe import assets_variant, check_rollout, default_trainer, dry_run_overrides, run_environment

pytestmark = pytest.mark.unit

ASSETS = TinyAssets(  # only paths: nothing here opens them
    root=Path("/assets"),
    model=Path("/assets/model"),
    critic_model=Path("/assets/critic_model"),
    train_file=Path("/assets/train.parquet"),
    val_file=Path("/assets/val.parquet"),
    reward_file=Path("/assets/reward.py"),
)


def overrides(family: str, algo: str = "gae", trainer: str | None = None) -> list[str]:
    return dry_run_overrides(ASSETS, 2, algo, trainer, "/out", n_gpus_per_node=2, family=family)


def keys(lines: list[str]) -> set[str]:
    return {line.split("=", 1)[0].lstrip("+") for line in lines}


def test_each_family_gets_its_own_default_trainer():
    assert [default_trainer(f) for f in ("0.7", "0.8", "0.9")] == ["v0", "v0", "v1"]
    assert "trainer.use_v1=true" in overrides("0.9")
    assert "trainer.use_v1=false" in overrides("0.9", trainer="v0")


@pytest.mark.parametrize("family", ["0.7", "0.8"])
def test_no_v1_trainer_before_0_9(family):
    assert "trainer.use_v1" not in keys(overrides(family))
    with pytest.raises(ValueError, match=rf"verl {family}\.x has no v1 trainer .*use trainer 'v0'"):
        overrides(family, trainer="v1")


def test_0_9_keeps_the_platform_and_needs_no_ray_cpu_resource():
    assert "ray_kwargs.ray_init.resources" not in keys(overrides("0.9"))


@pytest.mark.parametrize("family", ["0.7", "0.8"])
def test_before_0_9_ray_announces_a_cpu_resource_per_logical_gpu(family):
    lines = overrides(family)
    assert "+ray_kwargs.ray_init.resources={cpu:8}" in lines
    assert "+ray_kwargs.ray_init.num_gpus=8" in lines


def test_0_7_moves_the_critic_fsdp_block_and_names_the_layer_to_wrap():
    lines, k = overrides("0.7"), keys(overrides("0.7"))
    assert not any(key.startswith(("critic.fsdp.", "transfer_queue.")) for key in k)
    assert "critic.model.fsdp_config.strategy=fsdp2" in lines
    for block in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model"):
        assert f"{block}.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap" in k
    assert "actor_rollout_ref.actor.fsdp_config.dtype=float32" in lines
    # GRPO has no critic: nothing is written for one.
    assert not any(key.startswith("critic.") for key in keys(overrides("0.7", algo="grpo")))


def test_0_8_and_0_9_keep_the_engine_critic_block():
    for family in ("0.8", "0.9"):
        assert "critic.fsdp.strategy=fsdp2" in overrides(family)


def test_the_real_vllm_gets_its_engine_no_sleep_mode_and_eager():
    lines = dry_run_overrides(ASSETS, 2, "gae", None, "/out", n_gpus_per_node=2, family="0.9", rollout="vllm")
    assert "actor_rollout_ref.rollout.name=vllm" in lines
    assert "+actor_rollout_ref.rollout.enable_sleep_mode=false" in lines
    assert "actor_rollout_ref.rollout.enforce_eager=true" in lines
    stand_in = overrides("0.9")
    assert "actor_rollout_ref.rollout.name=cpu_hf" in stand_in and not any("sleep_mode" in o for o in stand_in)
    with pytest.raises(ValueError, match="rollout must be one of cpu_hf, vllm"):
        dry_run_overrides(ASSETS, 2, rollout="sglang", family="0.9")


def test_each_rollout_gets_the_network_it_takes():
    assert assets_variant("cpu_hf") == "cpu" and assets_variant("vllm") == "vllm"


def test_vllm_s_kv_cache_is_capped_per_server():
    assert run_environment("/out", {})["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert run_environment("/out", {"VLLM_CPU_KVCACHE_SPACE": "4"})["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_the_real_vllm_is_refused_without_vllm_s_cpu_build(monkeypatch):
    from importlib import metadata

    def version(name):
        if name == "vllm":
            raise metadata.PackageNotFoundError(name)
        return "1"

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(ValueError, match=r"no vLLM is installed here: run it from .*scripts/vllm-env.sh"):
        check_rollout("vllm")
    monkeypatch.setattr(metadata, "version", lambda name: "0.24.0")
    with pytest.raises(ValueError, match="vllm 0.24.0 is not vLLM's CPU build"):
        check_rollout("vllm")
    monkeypatch.setattr(metadata, "version", lambda name: "0.27.0+cpu")
    check_rollout("vllm")
    check_rollout("cpu_hf")
