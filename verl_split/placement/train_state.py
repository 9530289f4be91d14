"""What a training role keeps on each GPU of its pool between its calls: the input of ``placement.memory``.

FSDP (verl's FSDP engine, ``workers/config/engine.py`` ``FSDPEngineConfig``): parameters in ``model_dtype``
(fp32 by default: 4 bytes) unless ``param_offload``, and Adam's two fp32 moments (8 bytes a parameter) unless
``optimizer_offload``, both sharded over the FSDP group (``fsdp_size``, -1: the whole pool). Gradients are
freed after each update and not counted.

Megatron (verl's Megatron engine with megatron-core's DDP and distributed optimizer, 0.9.1 lines):

* parameters: a bf16 (or fp16) buffer of the rank's model shard, ``P / (TP x PP)`` for the dense weights and
  ``P_experts / (ETP x EP x PP)`` for the routed experts (megatron-core's ``_ParamAndGradBuffer``,
  ``distributed/param_and_grad_buffer.py``);
* gradients: a buffer of the same shard, fp32 unless the precision-aware optimizer keeps lower-precision main
  grads (verl's ``MegatronEngine._resolve_override_ddp_config``, ``transformer_impl.py``); it lives as long as the
  model: megatron-core zeroes it, never frees it. ``param_offload`` moves both to the CPU between calls
  (``offload_megatron_model_to_cpu``; verl's engine offloads the grads with the parameters,
  ``MegatronEngine.initialize``);
* the optimizer: fp32 main parameters and Adam's two fp32 moments, 12 bytes a parameter, which the
  distributed optimizer (``use_distributed_optimizer``, on by default) shards over the data-parallel (x CP)
  ranks of each shard: ``12 x P / GPUs`` per GPU; without it every rank holds its whole shard's.
  ``optimizer_offload`` moves it to the CPU.

A forward-only role (the reference) has parameters only. ``exporting``: the actor while it sends its weights
to the rollout; a Megatron engine's export loads its parameters to the GPU whatever ``param_offload`` says
(``MegatronEngine.get_per_tensor_param``, ``megatron/transformer_impl.py``), FSDP2's streams them one tensor at
a time (``FSDPEngine.get_per_tensor_param``, ``fsdp/transformer_impl.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_split.placement.job import FsdpBlock, Job
from verl_split.placement.megatron_config import MODEL_PREFIX
from verl_split.placement.mesh import Mesh

GIB = 1024**3
_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


@dataclass(frozen=True)
class State:
    """One role's bytes on one GPU of its pool, and how they were counted."""

    role: str
    params: float | None  # the model's parameters (None: unknown here)
    per_param: float  # bytes per parameter of the whole model, on one GPU
    how: str  # "/ 4 shards, parameters resident, optimizer resident"
    #: The config keys that move it off the GPU.
    offload_keys: tuple[str, ...] = ()

    @property
    def gb(self) -> float | None:
        return None if self.params is None else self.params * self.per_param / GIB

    def describe(self) -> str:
        if self.params is None:
            model = MODEL_PREFIX[self.role]
            flag = "critic" if self.role == "critic" else "actor"  # the reference is the actor's model
            return f"{self.role} state unknown (no config.json for {model}.path here; pass --{flag}-params)"
        return f"{self.role} {self.params / 1e9:.2f}B params {self.how}: {self.gb:.1f} GiB"


def role_state(job: Job, role: str, gpus: int, params: float | None, exporting: bool = False) -> State:
    """The role's state on one of its ``gpus`` GPUs; ``params`` None: its model's, from ``config.json``."""
    view = job.role(role)
    if params is None:
        params = view.model.shape.params
    if view.mesh is not None:
        return _megatron(view.mesh, gpus, params, exporting)
    return _fsdp(view.fsdp, role, gpus, params)


def _fsdp(block: FsdpBlock, role: str, gpus: int, params: float | None) -> State:
    size = block.size
    shards = size if size is not None and 0 < size < gpus else gpus
    param_offload = block.param_offload
    optimizer = role != "ref"
    optimizer_offload = block.optimizer_offload or not optimizer
    per_param = (0 if param_offload else _BYTES.get(block.model_dtype.lower(), 4)) + (0 if optimizer_offload else 8)
    parts = [("parameters", param_offload)] + ([("optimizer", optimizer_offload)] if optimizer else [])
    offload = ", ".join(f"{name} offloaded" if off else f"{name} resident" for name, off in parts)
    keys = (f"{block.key}.param_offload",) + ((f"{block.key}.optimizer_offload",) if optimizer else ())
    return State(role, params, per_param / max(1, shards), f"/ {max(1, shards)} shards, {offload}", keys)


def _megatron(mesh: Mesh, gpus: int, params: float | None, exporting: bool) -> State:
    shape = mesh.shape
    experts = shape.expert_params if shape.params and params == shape.params else 0.0
    # Bytes of the rank's shard per parameter of the whole model (dense by TP x PP, experts by ETP x EP x PP).
    dense_share = 1 - experts / params if params else 1.0
    shard = dense_share / (mesh.tp * mesh.pp) + (1 - dense_share) / mesh.expert_size
    train = mesh.role != "ref"
    param_offload = mesh.param_offload and not exporting
    grads_offloaded = mesh.param_offload or not train
    optimizer_off = mesh.optimizer_offload or not train
    per_param = (0 if param_offload else 2 * shard) + (0 if grads_offloaded else mesh.grad_bytes * shard)
    if not optimizer_off:
        per_param += 12 / gpus if mesh.distributed_optimizer else 12 * shard
    parts = [f"bf16 parameters {'offloaded' if param_offload else 'resident'}"]
    if train:
        parts.append(f"fp{8 * mesh.grad_bytes} grads {'offloaded' if grads_offloaded else 'resident'}")
        where = f"over {gpus} GPUs" if mesh.distributed_optimizer else "per shard"
        parts.append(f"Adam 12 B {where} {'offloaded' if optimizer_off else 'resident'}")
    keys = (mesh.key("param_offload"),) + ((mesh.key("optimizer_offload"),) if train else ())
    return State(mesh.role, params, per_param, f"(Megatron {mesh.describe()}: {', '.join(parts)})", keys)
