"""scripts/gpu_smoke.py's job, composed with verl's real Hydra config and checked against what would stop it on
a GPU. No GPU, vLLM or flash-attn here; each test says whether it runs the rule or restates it.

Run, not restated: verl 0.9.1's own config checks on the composed config (``validate_config``, the dataclasses each
worker builds), and what the composition gives (CUDA, vLLM, the dtypes and attention ``scripts/gpu_smoke.py``
sets, the GPU network). Restated by hand (the docstring or comment says so): vLLM's engine-argument rules and
verl's rules on replicas, batches and the push bucket. Read from vLLM's and flash-attn's released sources
instead, in the ``network`` tier (``tests/project/test_gpu_smoke_sources.py``): which backends vLLM can pick on
CUDA, each one's head sizes and dtypes, flash-attn's head-size, heads and dtype checks; that file also checks that
the vLLM conditions restated here are in the functions cited.

Sources cited: verl the installed 0.9.1 (``verl/...``); vLLM 0.24.0's sdist, the version verl 0.9.1 pins
(``vllm/...``); transformers the installed one (verl's ``vllm`` extra pins 5.9.0).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from omegaconf import OmegaConf
from support.paths import ROOT

from verl_split.core import compat
from verl_split.dryrun.assets import GPU_SHAPE, make_tiny_gpu_assets
from verl_split.tools.hydra_config import compose_config

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(compat.family_of(compat.installed_version()) != "0.9", reason="the smoke run is verl 0.9's"),
]

#: Each role's GPUs in the smoke runs: stock puts every role on both, split (halves) one each.
POOL_SIZES = {"stock": 2, "split": 1}
ROLES = {
    "actor": "actor_rollout_ref.actor.fsdp_config",
    "ref": "actor_rollout_ref.ref.fsdp_config",
    "critic": "critic.fsdp",
}


def load_gpu_smoke():
    """scripts/gpu_smoke.py as a module: importing it needs no GPU (main() checks for nvidia-smi)."""
    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "scripts" / "gpu_smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smoke():
    return load_gpu_smoke()


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_tiny_gpu_assets(tmp_path_factory.mktemp("gpu_assets"))


@pytest.fixture(scope="module")
def config(smoke, assets, tmp_path_factory):
    """The config main_ppo composes for every smoke run (gpu_smoke.main passes the same overrides)."""
    return compose_config("ppo_trainer", None, smoke.smoke_overrides(assets, 3, tmp_path_factory.mktemp("run")))


@pytest.fixture(scope="module")
def hf_config(assets):
    return json.loads((assets.model / "config.json").read_text())


def test_verls_own_config_checks_pass(config):
    """What main_ppo runs before Ray starts (verl/trainer/main_ppo.py, ``main``) and what each worker builds."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    assert need_critic(config)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=True)
    # RolloutConfig.__post_init__ (verl/workers/config/rollout.py), FSDPEngineConfig's (verl/workers/config/engine.py).
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    for role in ROLES.values():
        omega_conf_to_dataclass(OmegaConf.select(config, role))


def test_it_runs_on_cuda_with_vllm_and_rays_own_gpu_count(config, smoke):
    assert config.trainer.device == "cuda"
    assert config.actor_rollout_ref.rollout.name == "vllm"
    # Ray counts the node's GPUs and CPUs itself: no logical GPUs or CPUs from the CPU dry run.
    assert "num_gpus" not in config.ray_kwargs.ray_init and config.ray_kwargs.ray_init.num_cpus is None
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (1, smoke.GPUS)
    # No run switches the CPU mode on (its seams replace the rollout, the device and the attention).
    assert not any(k.startswith("VERL_SPLIT_CPU") for _, env in smoke.RUNS.values() for k in env)


@pytest.mark.parametrize("role", sorted(ROLES))
def test_flash_attention_gets_bf16(config, smoke, role):
    """Each role's mixed precision is gpu_smoke's ``MIXED_PRECISION`` (bf16 parameters): fp32 ones would skip
    autocast (verl/workers/engine/fsdp/transformer_impl.py, ``FSDPEngine._build_fsdp_module`` keeps the parameter
    dtype for ``FSDPEngineWithLMHead.forward_step``'s autocast), transformers then hands flash-attn the weights'
    dtype (transformers/integrations/flash_attention.py, ``get_target_dtype``), and flash-attn refuses fp32
    (read from its source: ``tests/project/test_gpu_smoke_sources.py`` checks ``MIXED_PRECISION``'s dtype against
    it)."""
    precision = OmegaConf.select(config, f"{ROLES[role]}.mixed_precision")
    assert smoke.MIXED_PRECISION["param_dtype"] == "bf16"
    assert dict(precision) == smoke.MIXED_PRECISION, role


def test_every_model_loads_flash_attention_as_verl_does_on_gpus(config):
    """No sdpa override: verl's default is flash_attention_2 (verl/workers/config/model.py,
    ``HFModelConfig.__post_init__``), the value model's loader asks for it whatever the config says
    (verl/utils/model.py, ``load_valuehead_model``), and padding removal (verl's default) goes through verl's
    flash-attention patch (verl/models/transformers/monkey_patch.py, ``apply_monkey_patch``)."""
    for model in ("actor_rollout_ref.model", "critic.model"):
        assert "attn_implementation" not in OmegaConf.select(config, f"{model}.override_config"), model
        assert OmegaConf.select(config, f"{model}.use_remove_padding") is True, model


def test_the_gpu_model_is_the_gpu_shape(config, assets, hf_config):
    """The models the run loads have ``GPU_SHAPE``, which tests/project/test_gpu_smoke_sources.py checks against vLLM's
    backends and flash-attn."""
    assert config.actor_rollout_ref.model.path == str(assets.model)
    assert config.critic.model.path == str(assets.critic_model)
    shape = (hf_config["hidden_size"], hf_config["num_attention_heads"], hf_config["num_key_value_heads"])
    assert shape == (GPU_SHAPE.hidden_size, GPU_SHAPE.num_attention_heads, GPU_SHAPE.num_key_value_heads)


def test_vllm_engine_arguments(config, smoke, hf_config):
    """The rollout's dtype is gpu_smoke's, which tests/project/test_gpu_smoke_sources.py checks against every CUDA
    backend's dtypes as vLLM's source defines them. The rest is restated by hand, from the sources named in each
    comment (that file checks each vLLM condition is still in the function cited)."""
    rollout = config.actor_rollout_ref.rollout
    assert rollout.dtype == smoke.REPLACED["actor_rollout_ref.rollout.dtype="] == "bfloat16"
    # Heads split over tensor parallelism (vllm/config/model.py, ModelConfig.verify_with_parallel_config).
    assert hf_config["num_attention_heads"] % rollout.tensor_model_parallel_size == 0
    # verl: max_model_len <= max_position_embeddings (verl/workers/rollout/vllm_rollout/vllm_async_server.py,
    # vLLMHttpServer._validate_configs); a prompt leaves room to answer (vLLMHttpServer.generate), here the
    # longest prompt and answer fit.
    assert rollout.max_model_len <= hf_config["max_position_embeddings"]
    assert rollout.prompt_length + rollout.response_length <= rollout.max_model_len
    # vLLM's scheduler (vllm/config/scheduler.py, SchedulerConfig.verify_max_model_len).
    assert rollout.max_num_batched_tokens >= rollout.max_num_seqs
    # 0 < u <= 1 (vllm/config/cache.py, CacheConfig.gpu_memory_utilization); u x the GPU must be free when vLLM
    # starts (vllm/v1/worker/utils.py, request_memory), beside stock's colocated actor, ref and critic: at most
    # verl's own colocated default, 0.5 (verl/trainer/config/rollout/rollout.yaml).
    assert 0 < rollout.gpu_memory_utilization <= 0.5


@pytest.mark.parametrize("run", sorted(POOL_SIZES))
def test_replicas_and_batches_fit_each_pool(config, run):
    """verl's rules on replicas and batches, restated by hand from the sources in the comments."""
    gpus = POOL_SIZES[run]
    rollout, n = config.actor_rollout_ref.rollout, config.actor_rollout_ref.rollout.n
    # verl builds world_size // (tp x dp x pp) replicas on the actor's pool (verl/workers/rollout/llm_server.py,
    # LLMServerManager._initialize_llm_servers), each of tp x dp x pp GPUs (verl/workers/rollout/replica.py,
    # RolloutReplica.__init__).
    replica = rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size
    assert gpus % replica == 0 and gpus // replica >= 1
    # Each update's mini-batch (ppo_mini_batch_size x n, verl/trainer/ppo/v1/trainer_base.py,
    # PPOTrainer._get_required_batch_multiple and _update_critic) splits evenly over the pool's data-parallel
    # ranks (verl/workers/engine_workers.py, TrainingWorker.train_mini_batch).
    for mini_batch in (config.actor_rollout_ref.actor.ppo_mini_batch_size, config.critic.ppo_mini_batch_size):
        assert (mini_batch * n) % gpus == 0, (run, mini_batch)
    assert (config.data.train_batch_size * n) % gpus == 0


def test_each_weight_fits_one_push_bucket(config, hf_config):
    """Restated by hand: a weight larger than the bucket stops verl's shared-memory transfer
    (verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py, BucketedWeightSender.async_send_weights);
    the largest here is the (tied) embedding, counted in fp32."""
    bucket = config.actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes << 20
    assert hf_config["vocab_size"] * hf_config["hidden_size"] * 4 <= bucket


def test_the_rules_find_the_cpu_recipes_settings(smoke, tmp_path):
    """The checks above bite: the CPU dry run's own overrides keep fp32 and sdpa, which a GPU run cannot."""
    from verl_split.dryrun.assets import TinyAssets
    from verl_split.dryrun.recipe import dry_run_overrides

    paths = TinyAssets(tmp_path, tmp_path / "m", tmp_path / "c", tmp_path / "t", tmp_path / "v", tmp_path / "r")
    cpu = dry_run_overrides(paths, 3, "gae", "v1", tmp_path, n_gpus_per_node=2)
    assert "+critic.fsdp.mixed_precision.param_dtype=fp32" in cpu
    assert "+critic.model.override_config.attn_implementation=sdpa" in cpu
    gpu = smoke.gpu_overrides(cpu)
    assert "+critic.fsdp.mixed_precision.param_dtype=bf16" in gpu
    assert not any("attn_implementation" in o or ("param_dtype" in o and o.endswith("=fp32")) for o in gpu)
