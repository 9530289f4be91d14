"""Does each pool of a candidate layout hold its models? The memory rule ``verl-split advise`` applies per pool.

Built on the planner's own count of what a training role keeps on a GPU (:func:`verl_split.placement.train_state.
role_state`: parameters, Adam's moments, Megatron's grad buffer, sharding, offload, all as the job's config sets
them). What this module adds is the moment each pool peaks, which the planner's shared-rollout check
(``placement.memory``, generation only) does not need:

* a role's update: its whole training state on the GPU, offloaded parts loaded back (verl loads the parameters for
  the update and the optimizer for its step), plus FSDP's gradients (the dtype of the parameters, sharded like
  them; Megatron's grad buffer is in ``role_state`` already), beside what the pool's other roles keep resident;
* plus 1.75 GiB of CUDA context and NCCL per process on the GPU (``placement.memory.CONTEXT_GB_PER_PROCESS``): the
  workers' and vLLM's.

Activations are not counted (they depend on micro-batches and checkpointing): the rule refuses only what cannot fit
even without them. Generation is not a refusal: verl 0.9 keeps the training states resident while it generates
(``engine_workers.py`` offloads the actor's parameters for the rollout only with ``param_offload``) and vLLM takes
``rollout.gpu_memory_utilization`` of the GPU beside them, a setting the user lowers for a smaller pool. So each
pool's room for vLLM is given instead, as the largest ``gpu_memory_utilization`` that fits beside the states, with a
note where the job's own is above it.

Parameter counts: ``--actor-params`` / ``--critic-params``, else each model's ``config.json`` (the config's model
path, found locally; nothing is downloaded), else the size in the model's name (``Qwen3-8B``: 8e9, said as such),
else unknown and the rule is not applied to that role. The GPU's memory is ``--gpu-memory``; without it nothing is
refused, and the estimate is shown beside what the runs reserved (``perf/max_memory_reserved_gb``, a floor of the
GPU's size, not its size).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from verl_split.placement.job import Job
from verl_split.placement.job_config import as_job
from verl_split.placement.memory import CONTEXT_GB_PER_PROCESS
from verl_split.placement.train_state import GIB, State, role_state

#: A size in a model's name: ``7b``, ``Qwen3-8B``, ``Qwen2.5-0.5B``, ``30B-A3B`` (the first: the total).
_NAME_SIZE_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")
#: vLLM's share when the config does not say (verl's default ``gpu_memory_utilization``).
DEFAULT_VLLM_SHARE = 0.5


@dataclass(frozen=True)
class PoolNeed:
    """One pool's peak per GPU, the moment it peaks, and what it is made of."""

    pool: str  # "actor pool", "critic pool", "one pool"
    gpus: int
    need_gb: float | None  # None: a model's size is unknown
    moment: str  # "the critic's update"
    parts: str
    #: At generation (the rollout's pool): the training states resident and the contexts, GiB per GPU.
    generation_gb: float | None = None
    vllm_share: float | None = None  # the job's rollout.gpu_memory_utilization

    def vllm_room(self, gpu_gb: float) -> float | None:
        """The largest ``gpu_memory_utilization`` that fits beside the resident states; None: no rollout here."""
        return None if self.generation_gb is None else max(0.0, (gpu_gb - self.generation_gb) / gpu_gb)


@dataclass(frozen=True)
class MemoryRule:
    job: Job  # the job's view, read from its config
    actor_params: float | None
    critic_params: float | None
    params_source: str
    gpu_gb: float | None
    gpu_source: str
    runs_reserved_gb: float | None = None

    def needs(self, actor_gpus: int, critic_gpus: int, colocated: bool) -> list[PoolNeed]:
        roles = ["actor", *(["ref"] if self.job.uses_reference else []), "critic"]
        if colocated:
            return [self._pool("one pool", actor_gpus, roles, rollout=True)]
        actor_side = [r for r in roles if r != "critic"]
        return [
            self._pool("actor pool", actor_gpus, actor_side, rollout=True),
            self._pool("critic pool", critic_gpus, ["critic"], rollout=False),
        ]

    def refusal(self, actor_gpus: int, critic_gpus: int, colocated: bool) -> str | None:
        """Why the layout cannot hold its models, or None (fits, or not known: no GPU size or model size)."""
        if self.gpu_gb is None:
            return None
        for need in self.needs(actor_gpus, critic_gpus, colocated):
            if need.need_gb is not None and need.need_gb > self.gpu_gb:
                return (
                    f"the {need.pool}'s GPUs cannot hold its models: {need.need_gb:.1f} GiB per GPU at {need.moment} "
                    f"({need.parts}) against {self.gpu_gb:g} GiB ({self.gpu_source}); activations not counted"
                )
        return None

    def _pool(self, name: str, gpus: int, roles: list[str], rollout: bool) -> PoolNeed:
        resident = {role: self._state(role, gpus, loaded=False) for role in roles}
        if any(state.gb is None for state in resident.values()):
            unknown = sorted({r for r, s in resident.items() if s.gb is None})
            return PoolNeed(name, gpus, None, "-", f"size of {', '.join(unknown)} unknown ({self.params_source})")
        contexts = CONTEXT_GB_PER_PROCESS * (2 if rollout else 1)  # the workers' process; vLLM's
        moments = []
        for role in (r for r in roles if r != "ref"):
            whole = self._state(role, gpus, loaded=True)
            grads = self._fsdp_grads_gb(role, gpus)
            others = sum(s.gb or 0.0 for r, s in resident.items() if r != role)
            total = (whole.gb or 0.0) + grads + others + contexts
            parts = f"{role} {whole.gb:.1f} GiB loaded + grads {grads:.1f} GiB + the rest resident {others:.1f} GiB"
            moments.append((total, f"the {role}'s update", parts))
        generation = share = None
        if rollout:
            share = self.job.rollout.gpu_memory_utilization
            share = DEFAULT_VLLM_SHARE if share is None else share
            generation = sum(s.gb or 0.0 for s in resident.values()) + contexts
        total, moment, parts = max(moments)
        return PoolNeed(name, gpus, total, moment, f"{parts} + CUDA/NCCL {contexts:g} GiB", generation, share)

    def _params(self, role: str) -> float | None:
        return self.critic_params if role == "critic" else self.actor_params

    def _state(self, role: str, gpus: int, loaded: bool) -> State:
        job = self.job
        if loaded:  # the update loads back what the config offloads between calls
            job = job.with_offload(role, param=False, optimizer=False)
        return role_state(job, role, gpus, self._params(role), exporting=loaded)

    def _fsdp_grads_gb(self, role: str, gpus: int) -> float:
        """FSDP's gradients during the update: the parameters' bytes, sharded like them (Megatron's grad buffer
        is in its state already). The whole state less the optimizer alone is the parameters' share."""
        if self.job.role(role).mesh is not None or self._params(role) is None:
            return 0.0
        whole = self._state(role, gpus, loaded=True)
        optimizer_only = role_state(
            self.job.with_offload(role, param=True, optimizer=False), role, gpus, self._params(role)
        )
        return ((whole.gb or 0.0) - (optimizer_only.gb or 0.0)) if whole.gb is not None else 0.0


def memory_rule(
    config: Job | Any | None,
    gpu_gb: float | None,
    actor_params: float | None = None,
    critic_params: float | None = None,
    runs_reserved_gb: float | None = None,
) -> MemoryRule:
    """The rule for this job: the flags' sizes first, then each model's ``config.json``, then its name.
    ``config``: the job's view, or its config (as the log gives it) to read it from."""
    job = as_job({} if config is None else config)
    sources = []
    sizes = {}
    for role, given in (("actor", actor_params), ("critic", critic_params)):
        if given is not None:
            sizes[role] = given
            sources.append(f"{role}: --{role}-params" if role == "critic" else "actor: --model-params")
            continue
        model = job.role(role).model
        if model.path is not None and model.shape.params is not None:
            sizes[role] = model.shape.params
            sources.append(f"{role}: its config.json")
            continue
        named = params_from_name(model.path)
        sizes[role] = named
        sources.append(f"{role}: {'the size in its name' if named else 'unknown, pass --' + role + '-params'}")
    source = "--gpu-memory" if gpu_gb is not None else "not given (--gpu-memory)"
    return MemoryRule(job, sizes["actor"], sizes["critic"], "; ".join(sources), gpu_gb, source, runs_reserved_gb)


def params_from_name(path: Any) -> float | None:
    """``.../deepseek-llm-7b-chat`` -> 7e9; None without a size in the name."""
    if not isinstance(path, str):
        return None
    match = _NAME_SIZE_RE.search(path.rstrip("/").rsplit("/", 1)[-1])
    return float(match.group(1)) * 1e9 if match else None


__all__ = ["GIB", "MemoryRule", "PoolNeed", "memory_rule", "params_from_name"]
