"""scripts/gpu_smoke.py's job, composed with verl's real Hydra config and checked against what would stop it
on a GPU: verl 0.9.1's own checks run here, vLLM's and flash-attn's rules are restated with their source.

No GPU, vLLM or flash-attn here. Sources, at the versions verl 0.9.1 pins (its METADATA: ``vllm==0.24.0``,
``flash-attn==2.8.3``): verl is the installed 0.9.1 (``verl/...``); vLLM the 0.24.0 sdist from PyPI
(``vllm/...``); flash-attn the tag v2.8.3 of Dao-AILab/flash-attention (``csrc/flash_attn/...``);
transformers the installed one (verl's ``vllm`` extra pins 5.9.0). How vLLM 0.24.0 picks an attention
backend on CUDA: the first valid one of a priority list (``vllm/platforms/cuda.py:143-160``: FLASH_ATTN,
FLASHINFER, TRITON_ATTN, FLEX_ATTENTION; FLASHINFER first on compute capability 10), valid meaning head
size, dtype, compute capability... all accepted (``vllm/v1/attention/backend.py:308-375``), else
"No valid attention backend found" (``cuda.py:444-447``).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from omegaconf import OmegaConf
from support.paths import ROOT

from verl_split.core import compat
from verl_split.dryrun.assets import CPU_SHAPE, GPU_SHAPE, make_tiny_gpu_assets
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
#: vLLM 0.24.0's CUDA backends for a decoder model, with the head sizes each takes.
VLLM_HEAD_SIZES = {
    "FLASH_ATTN": (lambda h: h % 8 == 0 and h <= 256, "vllm/v1/attention/backends/flash_attn.py:173-180"),
    "FLASHINFER": (lambda h: h in (64, 128, 256, 512), "vllm/v1/attention/backends/flashinfer.py:421-423"),
    "TRITON_ATTN": (lambda h: h >= 32, "vllm/v1/attention/backends/triton_attn.py:347-348"),
    "FLEX_ATTENTION": (lambda h: True, "vllm/v1/attention/backends/flex_attention.py:152-153 (no list)"),
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
    """What main_ppo runs before Ray starts (verl/trainer/main_ppo.py:177-181) and what each worker builds."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    assert need_critic(config)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=True)
    # RolloutConfig.__post_init__ (verl/workers/config/rollout.py:278), FSDPEngineConfig's (engine.py:304).
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
def test_flash_attention_gets_bf16(config, role):
    """fp32 parameters skip autocast (verl/workers/engine/fsdp/transformer_impl.py:403,1559-1565), transformers
    then hands flash-attn the weights' dtype (transformers/integrations/flash_attention.py:12-23), and
    flash-attn 2.8.3 takes fp16/bf16 only (csrc/flash_attn/flash_api.cpp:373-374 forward, :804 backward)."""
    precision = OmegaConf.select(config, f"{ROLES[role]}.mixed_precision")
    assert dict(precision) == {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}, role


def test_every_model_loads_flash_attention_as_verl_does_on_gpus(config):
    """No sdpa override: verl's default is flash_attention_2 (verl/workers/config/model.py:185), the value
    model's loader asks for it whatever the config says (verl/utils/model.py:649,674), and padding removal
    (verl's default) goes through verl's flash-attention patch (verl/models/transformers/monkey_patch.py:544-552)."""
    for model in ("actor_rollout_ref.model", "critic.model"):
        assert "attn_implementation" not in OmegaConf.select(config, f"{model}.override_config"), model
        assert OmegaConf.select(config, f"{model}.use_remove_padding") is True, model


def test_the_gpu_model_is_the_gpu_shape(config, assets, hf_config):
    assert config.actor_rollout_ref.model.path == str(assets.model)
    assert config.critic.model.path == str(assets.critic_model)
    shape = (hf_config["hidden_size"], hf_config["num_attention_heads"], hf_config["num_key_value_heads"])
    assert shape == (GPU_SHAPE.hidden_size, GPU_SHAPE.num_attention_heads, GPU_SHAPE.num_key_value_heads)


@pytest.mark.parametrize("backend", sorted(VLLM_HEAD_SIZES))
def test_every_vllm_cuda_backend_takes_the_gpu_head_size(backend):
    """Whichever backend vLLM picks (FLASHINFER first on compute capability 10, FLASH_ATTN elsewhere), it takes
    head size 64; vLLM's own FA3 build on Hopper has a kernel for it (vllm-project/flash-attention@803020a8,
    hopper/flash_api.cpp:524-527, the GIT_TAG of vLLM 0.24.0's cmake/external_projects/vllm_flash_attn.cmake:42)."""
    takes, source = VLLM_HEAD_SIZES[backend]
    assert takes(GPU_SHAPE.head_size), f"head size {GPU_SHAPE.head_size} refused by {backend} ({source})"


def test_the_cpu_head_size_is_why_the_gpu_shape_exists():
    """Head size 16: FLASH_ATTN takes it in 0.24.0 (a multiple of 8), so vLLM would not stop on Hopper or Ampere,
    but FLASHINFER (first on compute capability 10) and TRITON_ATTN refuse it: 64 leaves no backend out."""
    refused = {name for name, (takes, _) in VLLM_HEAD_SIZES.items() if not takes(CPU_SHAPE.head_size)}
    assert refused == {"FLASHINFER", "TRITON_ATTN"}


def test_flash_attn_2_takes_the_gpu_shape_forward_and_backward():
    """csrc/flash_attn/flash_api.cpp at v2.8.3: head size <= 256 and a multiple of 8 (:393-394 forward,
    :829-830 backward), query heads a multiple of the key/value heads (:395)."""
    assert GPU_SHAPE.head_size <= 256 and GPU_SHAPE.head_size % 8 == 0
    assert GPU_SHAPE.num_attention_heads % GPU_SHAPE.num_key_value_heads == 0


def test_vllm_engine_arguments(config, hf_config):
    rollout = config.actor_rollout_ref.rollout
    # Attention backends' dtypes: fp16/bf16 (vllm/v1/attention/backends/flash_attn.py:69, flashinfer.py:326).
    assert rollout.dtype in ("bfloat16", "float16")
    # Heads split over tensor parallelism (vllm/config/model.py:1165-1170).
    assert hf_config["num_attention_heads"] % rollout.tensor_model_parallel_size == 0
    # verl: max_model_len <= max_position_embeddings (verl/workers/rollout/vllm_rollout/vllm_async_server.py:
    # 1104-1111); a prompt leaves room to answer (:593-599), here the longest prompt and answer fit.
    assert rollout.max_model_len <= hf_config["max_position_embeddings"]
    assert rollout.prompt_length + rollout.response_length <= rollout.max_model_len
    # vLLM's scheduler (vllm/config/scheduler.py:286-291).
    assert rollout.max_num_batched_tokens >= rollout.max_num_seqs
    # 0 < u <= 1 (vllm/config/cache.py:67); u x the GPU must be free when vLLM starts (vllm/v1/worker/utils.py:
    # 405-423), beside stock's colocated actor, ref and critic: at most verl's own colocated default, 0.5
    # (verl/trainer/config/rollout/rollout.yaml).
    assert 0 < rollout.gpu_memory_utilization <= 0.5


@pytest.mark.parametrize("run", sorted(POOL_SIZES))
def test_replicas_and_batches_fit_each_pool(config, run):
    gpus = POOL_SIZES[run]
    rollout, n = config.actor_rollout_ref.rollout, config.actor_rollout_ref.rollout.n
    # verl builds world_size // (tp x dp x pp) replicas on the actor's pool (verl/workers/rollout/llm_server.py:
    # 434-460), each of tp x dp x pp GPUs (verl/workers/rollout/replica.py:107-117).
    replica = rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size
    assert gpus % replica == 0 and gpus // replica >= 1
    # Each update's mini-batch (ppo_mini_batch_size x n, verl/trainer/ppo/v1/trainer_base.py:1595-1603,1806-1810)
    # splits evenly over the pool's data-parallel ranks (verl/workers/engine_workers.py:267-269).
    for mini_batch in (config.actor_rollout_ref.actor.ppo_mini_batch_size, config.critic.ppo_mini_batch_size):
        assert (mini_batch * n) % gpus == 0, (run, mini_batch)
    assert (config.data.train_batch_size * n) % gpus == 0


def test_each_weight_fits_one_push_bucket(config, hf_config):
    """A weight larger than the bucket stops verl's shared-memory transfer (verl/workers/rollout/vllm_rollout/
    bucketed_weight_transfer.py:140-143); the largest here is the (tied) embedding, counted in fp32."""
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
