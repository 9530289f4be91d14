"""The job a verl config describes, as one typed view: read once from the config (``placement.job_config``),
then read by field.

The planner's requirements (``verl_config``), the batch rules (``batch_config``), shared rollout's checks and
memory estimate (``memory``, ``train_state``), the deferral's capacity check (``deferral_capacity``) and
``verl-split advise`` read these fields instead of verl's keys, and so does the runtime (shared rollout's requests
and servers, the overlap's warm-up and step-aside reasons: ``trainer_job`` keeps a trainer's view). Where a message
names the key a value came from, the view keeps the key beside the value (a role's FSDP blocks, its Ulysses keys, a
mesh's ``prefix``). A value that is unset reads as verl's default; one of another type (a quoted ``"8"``, the text
``"false"``) was refused when the view was read (``config_keys.count_key`` and its kind say why); the few kept as
the config writes them (``object``) are the ones a message quotes back or a check refuses.

Pure: no verl, no OmegaConf; built per verl family, since which keys a run's workers read depends on it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from verl_split.placement.mesh import Mesh, ModelShape
from verl_split.placement.model import TRAIN_BATCH

#: The training roles, in the order verl's trainer builds them.
TRAINING_ROLES: tuple[str, ...] = ("actor", "ref", "critic")


@dataclass(frozen=True)
class Model:
    """A role's model: where it lives, its shape, and its LoRA."""

    prefix: str  # "critic.model"
    path: str | None = None  # ``<prefix>.path``
    #: From the ``config.json`` of ``hf_config_path``, else of ``path`` (a local folder or the Hugging Face cache);
    #: the critic's counts its value head. Unknown fields are None.
    shape: ModelShape = ModelShape()
    lora_rank: int = 0  # ``lora_rank`` or ``lora.rank``, the larger; 0: no LoRA
    lora_merge: bool = False  # ``lora.merge``


@dataclass(frozen=True)
class FsdpBlock:
    """One place a role's FSDP engine settings may live (the critic's moved between families)."""

    key: str  # "critic.fsdp"
    present: bool = False
    size: int | None = None  # ``fsdp_size``; None: unset (verl's -1: the whole pool)
    model_dtype: str = "fp32"  # fp32, bf16 or fp16: verl's spelling of it (``job_config.MODEL_DTYPES``)
    param_offload: bool = False
    optimizer_offload: bool = False
    #: The engine's forward-only micro-batches (``use_dynamic_bsz``: cut by tokens, verl's EngineConfig default;
    #: else ``infer_micro_batch_size_per_gpu`` samples each): read for the critic's streamed values.
    infer_dynamic_bsz: bool = True
    infer_micro_batch: int | None = None


@dataclass(frozen=True)
class Role:
    """One training role (actor, ref, critic): its strategy, its meshes, its model."""

    name: str
    prefix: str  # "actor_rollout_ref.actor"
    model: Model
    #: Its own ``strategy`` key ("" unset: the reference then runs the actor's).
    strategy: str = ""
    #: The Megatron mesh when the role runs Megatron (the reference's sizes follow the actor's where unset).
    mesh: Mesh | None = None
    #: TP x PP x CP of its own ``megatron`` block, 1 where unset: the parallel size the planner checks.
    megatron_size: int = 1
    #: Every place its FSDP block may live, in verl's order of preference.
    fsdp_blocks: tuple[FsdpBlock, ...] = ()
    #: The keys the run's workers read its Ulysses size from, and their values (None: unset).
    ulysses: tuple[tuple[str, int | None], ...] = ()
    #: ``<prefix>.ulysses_sequence_parallel_size``, whether the run's workers read it or not.
    ulysses_role_key: int | None = None
    #: Dynamic batch sizes for its training (actor: ``use_dynamic_bsz``) or log-prob calls (reference:
    #: ``log_prob_use_dynamic_bsz``); the critic's is not read (False).
    dynamic_bsz: bool = False

    @property
    def fsdp(self) -> FsdpBlock:
        """The FSDP block the role's engine reads: the first present, else the newest family's."""
        return next((block for block in self.fsdp_blocks if block.present), self.fsdp_blocks[0])

    @property
    def ulysses_size(self) -> int:
        """The Ulysses size the run's workers give the role (the largest of its keys; unset or 0 is 1)."""
        return max((value or 1 for _, value in self.ulysses), default=1)

    def with_offload(self, param: bool, optimizer: bool) -> Role:
        """The role with its engine's offload switches set (the FSDP block it reads, or its mesh)."""
        chosen = self.fsdp
        blocks = tuple(
            dataclasses.replace(b, param_offload=param, optimizer_offload=optimizer) if b is chosen else b
            for b in self.fsdp_blocks
        )
        mesh = self.mesh
        if mesh is not None:
            mesh = dataclasses.replace(mesh, param_offload=param, optimizer_offload=optimizer)
        return dataclasses.replace(self, fsdp_blocks=blocks, mesh=mesh)


@dataclass(frozen=True)
class Rollout:
    """``actor_rollout_ref.rollout``, and whether the rollout is the actor's hybrid engine."""

    name: str | None = None  # vllm, sglang
    mode: str | None = None  # async, sync
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    n: int | None = None
    temperature: float = 1.0  # ``rollout.temperature``: what the trainer's requests carry
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    #: ``full_determinism``: verl's balancer routes each request by a hash of its id.
    full_determinism: bool = False
    log_prob_dynamic_bsz: bool = False
    #: ``checkpoint_engine.update_weights_bucket_megabytes``: the weight push's bucket.
    bucket_mb: float = 2048.0
    #: ``checkpoint_engine.backend``: the engine the actor's workers push weights with ("naive": in-process).
    checkpoint_backend: str = "naive"
    #: ``actor_rollout_ref.hybrid_engine``: the rollout runs in the actor's worker.
    hybrid: bool = True

    @property
    def replica(self) -> int:
        """GPUs of one replica: tp x dp x pp, unset sizes 1 (verl's ``RolloutReplica.world_size``)."""
        return _product(self.tp, self.dp, self.pp)


@dataclass(frozen=True)
class RewardModel:
    enabled: bool = False
    own_pool: bool = False  # ``enable_resource_pool``: a reward pool of its own
    replica: int = 1  # its rollout's tp x dp x pp


@dataclass(frozen=True)
class Trainer:
    nnodes: int | None = None  # ``model.Cluster`` refuses a count below 1
    n_gpus_per_node: int | None = None
    use_v1: bool = True  # 0.9's ``trainer.use_v1``; false runs ``RayPPOTrainer``
    legacy_worker_impl: str = "auto"  # 0.7's ``use_legacy_worker_impl`` (read on 0.7 only)
    v1_mode: str = "sync"  # ``trainer.v1.trainer_mode`` (read when the v1 trainer runs)
    #: ``trainer.v1.<v1_mode>.parameter_sync_step`` (1 unset), as the v1 trainer reads it; 1 for another trainer.
    parameter_sync_step: int = 1
    #: ``global_profiler.steps``: the steps verl profiles (empty: none), so true when any is.
    profiler_steps: tuple[int, ...] = ()
    critic_warmup: int = 0  # ``trainer.critic_warmup``: steps before the actor's first update


@dataclass(frozen=True)
class Algorithm:
    critic_enable: bool | None = None  # ``critic.enable``; None: unset (the estimator decides)
    adv_estimator: str = "gae"
    filter_groups: bool = False  # DAPO's ``filter_groups.enable``
    max_inflight_gen_batches: int = 1
    #: ``rollout_correction.bypass_mode``: the rollout's log-probs stand in for old_log_prob (none computed).
    rollout_bypass: bool = False


@dataclass(frozen=True)
class Batch:
    """The batch keys the rules read (``model.BATCH_KEYS``), and the data lengths."""

    values: tuple[tuple[str, int | None], ...] = ()  # key -> value (None: unset)
    #: key -> the key its value follows (an OmegaConf interpolation; a plain dict has none).
    followers: tuple[tuple[str, str], ...] = ()
    train_batch_set: bool = False  # ``data.train_batch_size`` is set: the batch rules apply
    gen_batch_size: int | None = None  # ``data.gen_batch_size``: prompts a step generates for, when not the batch
    max_prompt_length: int | None = None
    max_response_length: int | None = None

    def get(self, key: str) -> int | None:
        return dict(self.values).get(key)


@dataclass(frozen=True)
class TransferQueue:
    backend: str = "SimpleStorage"
    capacity: int | None = None  # ``SimpleStorage.total_storage_size``; None: unlimited or not a count
    units: int = 1  # ``SimpleStorage.num_data_storage_units``


@dataclass(frozen=True)
class Split:
    """The ``split_placement`` block: the placement as the config writes it (its parser checks it), the switches
    read (a value of another type refused as the view was read)."""

    block: object = None  # plain lists and dicts, interpolations resolved; None: absent
    shared_rollout: bool | None = None  # None: unset (``VERL_SPLIT_SHARED_ROLLOUT`` decides)
    ready_timeout_s: float | None = None  # above 0; None: unset (the default)


@dataclass(frozen=True)
class Job:
    """What the planner, the memory check and ``advise`` need of a run, read from its verl config once."""

    family: str  # whose rules apply: a known family ("0.7", "0.8", "0.9")
    asked_family: str  # as asked (or installed), before it was brought into the known ones
    rules: str  # the workers' batch rules: "v1", "v0" or "legacy" (``model.BATCH_RULES``)
    actor: Role
    ref: Role
    critic: Role
    rollout: Rollout = Rollout()
    reward_model: RewardModel = RewardModel()
    trainer: Trainer = Trainer()
    algorithm: Algorithm = Algorithm()
    batch: Batch = Batch()
    transfer_queue: TransferQueue = TransferQueue()
    split: Split = Split()
    #: A KL term needs the reference (``algorithm.use_kl_in_reward`` or the actor's ``use_kl_loss``).
    uses_reference: bool = False

    def role(self, name: str) -> Role:
        return {"actor": self.actor, "ref": self.ref, "critic": self.critic}[name]

    @property
    def needs_critic(self) -> bool:
        """verl's ``need_critic``: ``critic.enable`` when set, else the advantage estimator is GAE."""
        enable = self.algorithm.critic_enable
        # verl compares the text with its enum's "gae" as written (``need_critic``): "GAE" runs no critic.
        return enable if enable is not None else self.algorithm.adv_estimator == "gae"

    @property
    def critic_reason(self) -> str:
        enable, estimator = self.algorithm.critic_enable, self.algorithm.adv_estimator
        return f"critic.enable={enable}" if enable is not None else f"algorithm.adv_estimator={estimator}"

    @property
    def running_roles(self) -> tuple[str, ...]:
        """The training roles the run builds: the reference when a KL term needs it, the critic when enabled."""
        return tuple(
            r for r in TRAINING_ROLES if (r != "ref" or self.uses_reference) and (r != "critic" or self.needs_critic)
        )

    @property
    def requests_per_step(self) -> int | None:
        """A training step's generation requests: its prompts (``data.gen_batch_size``, else ``train_batch_size``)
        x ``rollout.n`` (unset: 1); None when neither batch size is set."""
        prompts = self.batch.gen_batch_size or self.batch.get(TRAIN_BATCH)
        return None if prompts is None else prompts * (self.rollout.n or 1)

    def meshes(self, roles: tuple[str, ...]) -> tuple[Mesh, ...]:
        """The Megatron meshes of ``roles``."""
        return tuple(mesh for mesh in (self.role(r).mesh for r in roles) if mesh is not None)

    def with_offload(self, role: str, param: bool, optimizer: bool) -> Job:
        """The same job with ``role``'s offload switches set (advise's moment of an update)."""
        return dataclasses.replace(self, **{role: self.role(role).with_offload(param, optimizer)})


def _product(*sizes: int | None) -> int:
    total = 1
    for size in sizes:
        total *= 1 if size is None else size
    return total
