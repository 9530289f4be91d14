"""A Megatron role's parallel layout, as its config sets it: what megatron-core builds its process groups from.

verl hands these sizes to ``mpu.initialize_model_parallel`` (``MegatronEngine._init_device_mesh`` in
``verl/workers/engine/megatron/transformer_impl.py``, citations megatron_init_mesh; on 0.7's legacy workers
``ActorRolloutRefWorker.__init__`` in ``workers/megatron_workers.py``),
and megatron-core derives every group from them and the world size, a pool's GPU count here. Read from the
config by ``placement.megatron_config``; checked against a plan by ``placement.megatron``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The sizes that make a Megatron mesh, as (attribute, config key under ``<role>.megatron``).
MESH_KEYS: tuple[tuple[str, str], ...] = (
    ("tp", "tensor_model_parallel_size"),
    ("pp", "pipeline_model_parallel_size"),
    ("cp", "context_parallel_size"),
    ("ep", "expert_model_parallel_size"),
    ("etp", "expert_tensor_parallel_size"),
    ("vpp", "virtual_pipeline_model_parallel_size"),
)

#: The order verl builds the Megatron engines of one worker process in; the first sets the process's mesh
#: (``placement.megatron``'s docstring): the engine workers (0.8, 0.9, 0.7 with its engine workers) build the
#: critic's in its constructor, then the reference's and the actor's; 0.7's legacy workers the actor's first.
ENGINE_ORDER: tuple[str, ...] = ("critic", "ref", "actor")
LEGACY_ORDER: tuple[str, ...] = ("actor", "ref", "critic")


@dataclass(frozen=True)
class ModelShape:
    """What the checks need of the model, from its Hugging Face ``config.json`` (None: not known here)."""

    layers: int | None = None
    #: Routed experts per MoE layer; 0 for a dense model.
    experts: int | None = None
    params: float | None = None
    #: Of ``params``, those in routed experts (sharded by EP x ETP instead of TP).
    expert_params: float = 0.0


@dataclass(frozen=True)
class Mesh:
    """One Megatron role's sizes, and the few engine settings the rules read."""

    role: str  # actor, ref, critic
    prefix: str  # where its engine block lives: "critic.megatron"
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    #: None: megatron-core uses ``tp`` (``initialize_model_parallel``; citations mc_etp_default).
    etp: int | None = None
    #: None: no interleaved schedule. Any value, 1 included, asks megatron-core for one.
    vpp: int | None = None
    dynamic_cp: bool = False
    max_seqlen_per_dp_cp_rank: object = None
    #: The role's ``model.use_remove_padding`` (verl copies it into the engine in ``TrainingWorker.__init__``,
    #: ``verl/workers/engine_workers.py``; citations engine_remove_padding).
    remove_padding: bool = True
    #: ``override_transformer_config.microbatch_group_size_per_vp_stage``; None: megatron-core uses ``pp``.
    micro_group: int | None = None
    #: The layers are split unevenly or by a layout (``num_layers_in_first_pipeline_stage`` and the like).
    custom_layer_split: bool = False
    param_offload: bool = False
    optimizer_offload: bool = False
    distributed_optimizer: bool = True
    #: Bytes of a gradient in the DDP grad buffer: fp32 unless verl reduces in lower precision.
    grad_bytes: int = 4
    shape: ModelShape = ModelShape()

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    @property
    def model_size(self) -> int:
        """GPUs of one model replica: tp x pp x cp (megatron-core's ``model_size``)."""
        return self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def expert_size(self) -> int:
        """GPUs of one expert replica: etp x ep x pp."""
        return self.expert_tp * self.ep * self.pp

    @property
    def interleaved(self) -> bool:
        """More than one virtual stage per pipeline rank: verl's micro-batch group rule applies."""
        return self.vpp is not None and self.vpp > 1

    @property
    def group(self) -> int:
        """Micro-batches of a virtual-stage group (megatron-core's default: pp; citations mc_group_default)."""
        return self.micro_group or self.pp

    def sizes(self) -> tuple[int, int, int, int, int, int | None]:
        """What must be equal for two engines to share a process's mesh."""
        return (self.tp, self.pp, self.cp, self.ep, self.expert_tp, self.vpp)

    def describe(self) -> str:
        parts = [f"TP={self.tp}", f"PP={self.pp}", f"CP={self.cp}"]
        if self.ep > 1 or self.etp is not None:
            parts += [f"EP={self.ep}", f"ETP={self.expert_tp}"]
        if self.vpp is not None:
            parts.append(f"VPP={self.vpp}")
        return " x ".join(parts)

    def data_parallel_size(self, world: int) -> int:
        """What verl's engine reports: 1 under dynamic context parallelism, else world / (tp x pp x cp)."""
        return 1 if self.dynamic_cp else world // self.model_size
