"""Shared rollout's memory on both pools' GPUs: an estimate, and a refusal before Ray when it cannot fit.

With shared rollout every critic-pool GPU holds, while the pool generates and while the actor's weights
are pushed to it, at once:

* vLLM's share: ``actor_rollout_ref.rollout.gpu_memory_utilization`` x the GPU's memory. vLLM takes that
  fraction for its weights and KV cache, and refuses to start if that much is not free
  (its memory profiling at start-up); verl's colocated replicas keep it while they sleep at level 1
  (weights in pinned host memory, ``vLLMHttpServer.sleep`` in ``vllm_async_server.py``) and take it back on
  wake-up, before the push.
* the reference's parameters when the placement puts it beside the critic (``critic,ref:6-7``), counted
  there and not on the actor's pool;
* the critic's training state, resident unless offloaded (``placement.train_state``): with FSDP its
  parameters (``critic.fsdp.model_dtype``, fp32 by default) and Adam's moments sharded over its FSDP group;
  with Megatron the bf16 parameters and the fp32 grad buffer of its TP x PP shard, and the distributed
  optimizer's 12 bytes a parameter over the pool. Activations are not counted: they live during the
  critic's update, not during generation.
* the push's two buffers of ``actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes``
  (default 2048 MB) on every GPU of the NCCL checkpoint engine (``NCCLCheckpointEngine.prepare``; ``core.citations``
  nccl_buckets).
* a fixed allowance for the CUDA contexts and NCCL of the processes on the GPU (critic worker,
  checkpoint-engine worker, vLLM engine): ``CONTEXT_GB_PER_PROCESS`` each.

So ``need = u x M + critic state + 2 x bucket + 3 x 1.75 GiB`` must stay within ``M``.

Every actor-pool GPU joins the push too: verl's checkpoint-engine manager prepares every actor rank
(``CheckpointEngineManager.build_process_group`` in ``checkpoint_engine/base.py``), and each allocates the same
two buffers (``NCCLCheckpointEngine.prepare``) beside the actor's state (its parameters loaded for the export) and a
reference model's. When the push comes at the weight sync, the actor pool's hybrid vLLM is asleep then:
``actor state + ref state + 2 x bucket + 2 x 1.75 GiB`` (actor worker, vLLM) must stay within ``M``. Under the
late join (``VERL_SPLIT_LATE_JOIN=on`` with ``defer_critic``) the push comes while that vLLM generates, awake:
its ``u x M`` is resident too, and counted. Transient tensors of the export (one gathered weight at a time) are
not counted.

Parameter counts come from each model's Hugging Face ``config.json`` (``critic.model.path``,
``actor_rollout_ref.model.path``: a local folder or the Hugging Face cache; nothing is downloaded) or are
given (``verl-split plan --critic-params 7B --actor-params 8B``); ``M`` is given (``--gpu-memory-gb``) or, in
a run, read from ``nvidia-smi`` on the launching node. Without either the estimate is shown and nothing is
refused.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from verl_split.core.citations import cite
from verl_split.core.errors import PlacementError
from verl_split.placement.hf_config import params_from_config
from verl_split.placement.job import Job
from verl_split.placement.job_config import as_job
from verl_split.placement.model import Plan
from verl_split.placement.train_state import GIB, State, role_state

__all__ = ["GIB", "MemoryEstimate", "check", "detect_gpu_gb", "estimate", "params_from_config", "with_memory_estimate"]

#: CUDA context and NCCL of one process on a GPU, an allowance above what one GPU measured
#: (``benchmarks/gpu_push_cost.py`` on an H200, torch 2.11 / CUDA 13, ``benchmarks/gpu_push_cost_h200.json``):
#: the context 0.51 GiB, a torch NCCL communicator 0.63 GiB and cupy's (the push's) 0.38 GiB, each with one
#: rank. The actor's worker holds all three at the push, 1.53 GiB; a communicator over many ranks takes more
#: (NCCL's buffers per peer), so 0.2 GiB above it.
#: It was 1 GiB before that measurement.
CONTEXT_GB_PER_PROCESS = 1.75
#: The processes on a critic-pool GPU with shared rollout: critic worker, checkpoint-engine worker, vLLM.
PROCESSES = 3
#: On an actor-pool GPU: the actor's worker (reference and checkpoint engine inside it), the sleeping vLLM.
ACTOR_PROCESSES = 2
ROLLOUT = "actor_rollout_ref.rollout"
AWAKE = " and the actor pool's vLLM, awake: under the late join the push comes while it generates"
SWITCH_OFF = "switch shared rollout off (unset VERL_SPLIT_SHARED_ROLLOUT, or split_placement.shared_rollout=false)"


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB on one GPU of a pool while the weights are pushed (and, on the critic pool, it generates)."""

    states: tuple[State, ...]
    vllm_fraction: float
    bucket_mb: float
    gpu_gb: float | None
    processes: int = PROCESSES
    pool: str = "critic-pool"

    @property
    def critic_state_gb(self) -> float | None:
        """The training state on the GPU (the critic's on the critic pool); None when a size is unknown."""
        sizes = [state.gb for state in self.states]
        return None if any(size is None for size in sizes) else sum(s for s in sizes if s is not None)

    @property
    def push_gb(self) -> float:
        return 2 * self.bucket_mb / 1024

    @property
    def fixed_gb(self) -> float:
        return CONTEXT_GB_PER_PROCESS * self.processes

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
        gpu = f"{self.gpu_gb:g} GiB" if self.gpu_gb is not None else "M"
        parts = [state.describe() for state in self.states]
        if self.vllm_fraction:
            vllm = f"vLLM {self.vllm_fraction:g} x {gpu}"
            parts.insert(0, vllm + (f" = {self.vllm_fraction * self.gpu_gb:.1f} GiB" if self.gpu_gb else ""))
        total = ""
        if self.need_gb is not None and self.gpu_gb is not None:
            total = f" = {self.need_gb + self.vllm_fraction * self.gpu_gb:.1f} of {self.gpu_gb:g} GiB"
        what = "memory" if self.pool == "critic-pool" else "push memory"
        return (
            f"shared rollout {what} per {self.pool} GPU: {' + '.join(parts)} + push buffers 2 x {self.bucket_mb:g} "
            f"MB = {self.push_gb:.1f} GiB + CUDA/NCCL {self.fixed_gb:g} GiB{total}"
        )


def _vllm_share(job: Job) -> float:
    share = job.rollout.gpu_memory_utilization
    return 0.5 if share is None else share


def estimate(
    config: Job | Any,
    critic_gpus: int,
    gpu_gb: float | None,
    critic_params: float | None,
    reference: bool = False,
    actor_params: float | None = None,
) -> MemoryEstimate:
    """One critic-pool GPU: vLLM's share, the critic's state (and the reference's, ``reference``: placed on the
    critic's pool), the push's buffers, the processes' contexts. ``config``: the job's view, or verl's config to
    read it from; ``actor_params``: the reference's parameters (the actor's model), None: from its config.json."""
    job = as_job(config)
    states = [role_state(job, "critic", critic_gpus, critic_params)]
    if reference:
        states.append(role_state(job, "ref", critic_gpus, actor_params))
    return MemoryEstimate(
        states=tuple(states),
        vllm_fraction=_vllm_share(job),
        bucket_mb=job.rollout.bucket_mb,
        gpu_gb=gpu_gb,
    )


def actor_estimate(
    job: Job,
    actor_gpus: int,
    gpu_gb: float | None,
    actor_params: float | None,
    vllm_awake: bool = False,
    reference: bool = True,
) -> MemoryEstimate:
    """One actor-pool GPU during the push: the actor's state (and the reference's, unless ``reference`` is False:
    placed on the critic's pool), the push's buffers, and the hybrid vLLM's share when the push comes while it
    generates (``vllm_awake``: the late join)."""
    states = [role_state(job, "actor", actor_gpus, actor_params, exporting=True)]
    if job.uses_reference and reference:
        states.append(role_state(job, "ref", actor_gpus, actor_params))
    return MemoryEstimate(
        states=tuple(states),
        vllm_fraction=_vllm_share(job) if vllm_awake else 0.0,
        bucket_mb=job.rollout.bucket_mb,
        gpu_gb=gpu_gb,
        processes=ACTOR_PROCESSES,
        pool="actor-pool",
    )


def check(found: MemoryEstimate, where: str) -> None:
    if found.fits() is not False:
        return
    assert found.need_gb is not None and found.gpu_gb is not None
    offload = " and ".join(f"{key}=true" for state in found.states for key in state.offload_keys)
    bucket = f"{ROLLOUT}.checkpoint_engine.update_weights_bucket_megabytes"
    if found.pool == "critic-pool":
        room = found.gpu_gb - found.need_gb
        raise PlacementError(
            f"{where}: shared rollout does not fit a critic-pool GPU. {found.describe()}. Make room: {offload} "
            f"(verl loads the critic back for values and its update), a lower {ROLLOUT}.gpu_memory_utilization (at "
            f"most {max(room, 0) / found.gpu_gb:.2f} here), a smaller {bucket}, a larger critic pool, or {SWITCH_OFF}."
        )
    raise PlacementError(
        f"{where}: shared rollout's weight push does not fit an actor-pool GPU: verl's NCCL checkpoint engine "
        f"allocates its two buckets on every actor rank ({cite('nccl_buckets')}) beside the actor's "
        f"state{AWAKE if found.vllm_fraction else ''}. {found.describe()}. Make room: "
        f"{offload}, a smaller {bucket} (the push needs 2 of it), a larger actor pool, "
        f"{'VERL_SPLIT_LATE_JOIN=off (the push then comes while that vLLM sleeps), ' if found.vllm_fraction else ''}"
        f"or {SWITCH_OFF}."
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


def late_join_pushes_beside_vllm() -> bool:
    """The run asked for the late join (``VERL_SPLIT_LATE_JOIN=on``) and the deferred critic update: the critic
    pool's push can then come while the actor pool's vLLM generates. ``auto`` keeps it off on GPUs, and the CPU
    dry run has no GPU memory to check."""
    from verl_split.core import settings

    current = settings.current()
    return current.late_join is True and current.defer_critic


def with_memory_estimate(
    plan: Plan,
    config: Job | Any,
    gpu_gb: float | None,
    critic_params: float | None,
    actor_params: float | None = None,
    late_join: bool | None = None,
) -> Plan:
    """Refuse a shared-rollout plan whose critic-pool or actor-pool GPUs cannot hold it; else note the estimates.
    ``late_join``: the push may come beside the actor pool's awake vLLM (default: what the settings ask).
    ``config``: the job's view, or verl's config to read it from."""
    critic, actor = plan.pool_of("critic"), plan.pool_of("actor")
    if critic is None or actor is None:
        return plan
    job = as_job(config)
    where = f"{plan.source}={plan.placement!r}"
    # The reference counts on the pool that holds it (``critic,ref:6-7`` puts it beside the critic).
    ref_on_critic = job.uses_reference and plan.pool_of("ref") is critic and critic is not actor
    found = estimate(job, critic.size, gpu_gb, critic_params, reference=ref_on_critic, actor_params=actor_params)
    check(found, where)
    awake = late_join_pushes_beside_vllm() if late_join is None else late_join
    pushed = actor_estimate(job, actor.size, gpu_gb, actor_params, vllm_awake=awake, reference=not ref_on_critic)
    check(pushed, where)
    return dataclasses.replace(plan, notes=(*plan.notes, found.describe(), pushed.describe()))
