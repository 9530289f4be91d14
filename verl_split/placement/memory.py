"""Shared rollout's memory on a critic-pool GPU: an estimate, and a refusal before Ray when it cannot fit.

With shared rollout every critic-pool GPU holds, while the pool generates and while the actor's weights
are pushed to it, at once:

* vLLM's share: ``actor_rollout_ref.rollout.gpu_memory_utilization`` x the GPU's memory. vLLM takes that
  fraction for its weights and KV cache, and refuses to start if that much is not free
  (its memory profiling at start-up); verl's colocated replicas keep it while they sleep at level 1
  (weights in pinned host memory, ``vllm_async_server.py:859-860`` in verl 0.9.1) and take it back on
  wake-up, before the push.
* the critic's training state, resident unless offloaded: its parameters (``critic.fsdp.model_dtype``,
  fp32 by default: 4 bytes each) unless ``critic.fsdp.param_offload``, and Adam's two moments (fp32:
  8 bytes a parameter) unless ``critic.fsdp.optimizer_offload``, sharded over the critic's FSDP group
  (``critic.fsdp.fsdp_size``, -1: the whole critic pool). Gradients and activations are not counted:
  they live during the critic's update, not during generation.
* the push's two buffers of ``actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes``
  (default 2048 MB) on every GPU of the NCCL checkpoint engine (``nccl_checkpoint_engine.py:124-125,169-173``).
* a fixed allowance for the CUDA contexts and NCCL of the processes on the GPU (critic worker,
  checkpoint-engine worker, vLLM engine): ``CONTEXT_GB_PER_PROCESS`` each.

So ``need = u x M + P_c x (4 [no param offload] + 8 [no optimizer offload]) / shards + 2 x bucket + 3 x 1 GiB``
must stay within ``M``. The critic's parameter count ``P_c`` comes from its Hugging Face ``config.json``
(``critic.model.path``: a local folder or the Hugging Face cache; nothing is downloaded) or is given
(``verl-split plan --critic-params 7B``); ``M`` is given (``--gpu-memory-gb``) or, in a run, read from
``nvidia-smi`` on the launching node. Without either the estimate is shown and nothing is refused.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement.model import Plan

GIB = 1024**3
#: CUDA context and NCCL of one process on a GPU, a round allowance.
CONTEXT_GB_PER_PROCESS = 1.0
#: The processes on a critic-pool GPU with shared rollout: critic worker, checkpoint-engine worker, vLLM.
PROCESSES = 3
_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB on one critic-pool GPU while it generates and receives the push."""

    critic_params: float | None
    shards: int
    param_bytes: int
    param_offload: bool
    optimizer_offload: bool
    vllm_fraction: float
    bucket_mb: float
    gpu_gb: float | None

    @property
    def critic_state_gb(self) -> float | None:
        if self.critic_params is None:
            return None
        per_param = (0 if self.param_offload else self.param_bytes) + (0 if self.optimizer_offload else 8)
        return self.critic_params * per_param / self.shards / GIB

    @property
    def push_gb(self) -> float:
        return 2 * self.bucket_mb / 1024

    @property
    def fixed_gb(self) -> float:
        return CONTEXT_GB_PER_PROCESS * PROCESSES

    @property
    def need_gb(self) -> float | None:
        """Everything but vLLM's share, which is a fraction of the GPU."""
        state = self.critic_state_gb
        return None if state is None else state + self.push_gb + self.fixed_gb

    def fits(self) -> bool | None:
        if self.need_gb is None or self.gpu_gb is None:
            return None
        return self.need_gb + self.vllm_fraction * self.gpu_gb <= self.gpu_gb

    def describe(self) -> str:
        state = self.critic_state_gb
        offload = ", ".join(
            f"{name} offloaded" if on else f"{name} resident"
            for name, on in (("parameters", self.param_offload), ("optimizer", self.optimizer_offload))
        )
        critic = (
            "critic state unknown (no config.json for critic.model.path here; pass --critic-params)"
            if state is None
            else f"critic {self.critic_params / 1e9:.2f}B params / {self.shards} shards, {offload}: {state:.1f} GiB"
        )
        gpu = f"{self.gpu_gb:g} GiB" if self.gpu_gb is not None else "M"
        vllm = f"vLLM {self.vllm_fraction:g} x {gpu}" + (
            f" = {self.vllm_fraction * self.gpu_gb:.1f} GiB" if self.gpu_gb is not None else ""
        )
        total = ""
        if self.need_gb is not None and self.gpu_gb is not None:
            total = f" = {self.need_gb + self.vllm_fraction * self.gpu_gb:.1f} of {self.gpu_gb:g} GiB"
        return (
            f"shared rollout memory per critic-pool GPU: {vllm} + {critic} + push buffers 2 x {self.bucket_mb:g} MB "
            f"= {self.push_gb:.1f} GiB + CUDA/NCCL {self.fixed_gb:g} GiB{total}"
        )


def estimate(config: Any, critic_gpus: int, gpu_gb: float | None, critic_params: float | None) -> MemoryEstimate:
    from verl_split.placement.config_keys import select_key

    fsdp = next((b for b in ("critic.fsdp", "critic.model.fsdp_config") if select_key(config, b) is not None), None)
    shards = critic_gpus
    dtype, param_offload, optimizer_offload = "fp32", False, False
    if fsdp is not None:
        size = select_key(config, f"{fsdp}.fsdp_size", -1)
        if isinstance(size, int) and 0 < size < critic_gpus:
            shards = size
        dtype = str(select_key(config, f"{fsdp}.model_dtype", "fp32"))
        param_offload = bool(select_key(config, f"{fsdp}.param_offload", False))
        optimizer_offload = bool(select_key(config, f"{fsdp}.optimizer_offload", False))
    if critic_params is None:
        critic_params = params_from_config(select_key(config, "critic.model.path"), value_head=True)
    rollout = "actor_rollout_ref.rollout"
    return MemoryEstimate(
        critic_params=critic_params,
        shards=max(1, shards),
        param_bytes=_BYTES.get(dtype.lower(), 4),
        param_offload=param_offload,
        optimizer_offload=optimizer_offload,
        vllm_fraction=float(select_key(config, f"{rollout}.gpu_memory_utilization", 0.5)),
        bucket_mb=float(select_key(config, f"{rollout}.checkpoint_engine.update_weights_bucket_megabytes", 2048)),
        gpu_gb=gpu_gb,
    )


def check(found: MemoryEstimate, where: str) -> None:
    if found.fits() is False:
        assert found.need_gb is not None and found.gpu_gb is not None
        room = found.gpu_gb - found.need_gb
        raise PlacementError(
            f"{where}: shared rollout does not fit a critic-pool GPU. {found.describe()}. Make room: "
            "critic.fsdp.param_offload=true and critic.fsdp.optimizer_offload=true (verl loads the critic back "
            "for values and its update), a lower actor_rollout_ref.rollout.gpu_memory_utilization (at most "
            f"{max(room, 0) / found.gpu_gb:.2f} here), a smaller "
            "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes, a larger critic pool, "
            "or switch shared rollout off (unset VERL_SPLIT_SHARED_ROLLOUT, or split_placement.shared_rollout=false)."
        )


def detect_gpu_gb() -> float | None:
    """The smallest GPU's memory on this node from ``nvidia-smi`` (no CUDA context is made); None without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        sizes = [float(line) / 1024 for line in out.split() if line.strip()]  # MiB
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return min(sizes) if sizes else None


def params_from_config(path: Any, value_head: bool = False) -> float | None:
    """Parameters of a decoder model from its ``config.json``: a local folder, or the Hugging Face cache."""
    config = _read_hf_config(path)
    if config is None:
        return None
    config = config.get("text_config", config)
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        vocab = int(config["vocab_size"])
        heads = int(config.get("num_attention_heads", 1))
        head_dim = int(config.get("head_dim") or hidden // heads)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        experts = int(
            config.get("num_experts") or config.get("num_local_experts") or config.get("n_routed_experts") or 1
        )
        inter = int(config.get("moe_intermediate_size") or config["intermediate_size"]) if experts > 1 else None
        inter = inter or int(config["intermediate_size"])
    except (KeyError, TypeError, ValueError):
        return None
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * inter * experts
    head = hidden if value_head else (0 if config.get("tie_word_embeddings") else vocab * hidden)
    return float(vocab * hidden + layers * (attention + mlp + 2 * hidden) + head)


def _read_hf_config(path: Any) -> dict[str, Any] | None:
    if not isinstance(path, str) or not path:
        return None
    local = os.path.expanduser(path)
    candidates = [os.path.join(local, "config.json")]
    if "/" in path and not os.path.isdir(local):
        hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
        )
        folder = os.path.join(hub, "models--" + path.replace("/", "--"), "snapshots", "*", "config.json")
        candidates += sorted(glob.glob(folder))
    for candidate in candidates:
        try:
            with open(candidate) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            continue
    return None


def with_memory_estimate(plan: Plan, config: Any, gpu_gb: float | None, critic_params: float | None) -> Plan:
    """Refuse a shared-rollout plan whose critic-pool GPUs cannot hold it; else note the estimate."""
    critic = plan.pool_of("critic")
    if critic is None:
        return plan
    found = estimate(config, critic.size, gpu_gb, critic_params)
    check(found, f"{plan.source}={plan.placement!r}")
    return dataclasses.replace(plan, notes=(*plan.notes, found.describe()))
