"""Read verl's trainer config (OmegaConf or nested dicts) into the job's view (``placement.job``), once.

The one reader of verl's keys (with ``megatron_config`` for a Megatron role's block): everything after reads
the view's fields, the runtime too (``trainer_job``). A value of another type than its key's is refused here,
naming the key, the value and the type (``config_keys.count_key``, ``flag_key``, ``number_key``: verl passes it
on unconverted, so its workers would fail on it after Ray started, or misread it).

Which keys a role's Ulysses size comes from, and so the view, depend on the verl family:

* 0.9 runs its v1 trainer unless ``trainer.use_v1=false`` (``verl/trainer/main_ppo.py``); 0.8 runs
  ``RayPPOTrainer`` on the engine workers; 0.7 its legacy ``fsdp_workers`` / ``megatron_workers`` unless
  ``trainer.use_legacy_worker_impl=disable`` (0.7.1 ``main_ppo.py`` ``TaskRunner.add_actor_rollout_worker``).
* 0.7's legacy workers read a role's own Ulysses key (``verl/workers/fsdp_workers.py``, the ``__init__`` of
  ``ActorRolloutRefWorker`` and ``CriticWorker``). The engine workers read the engine block: the actor's config
  copies its role-level key there when above 1 (``verl/workers/config/actor.py``
  ``FSDPActorConfig.__post_init__``), the critic's never does (0.8.0 and 0.9.1 ``verl/workers/config/critic.py``
  ``FSDPCriticConfig``: the role-level key is "[DEPRECATED]" and only validated), so there
  ``critic.ulysses_sequence_parallel_size`` alone leaves the critic without SP.
* The critic's FSDP block: 0.7's legacy ``CriticWorker`` reads ``critic.model.fsdp_config``, 0.8 and 0.9
  ``critic.fsdp``. A config has one of the two.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from verl_split.core import compat, settings
from verl_split.core.errors import PlacementError, SettingsError
from verl_split.placement.config_keys import (
    SWITCH,
    choice_key,
    count_key,
    flag_key,
    number_key,
    present_key,
    select_key,
    steps_key,
    text_key,
    wrong_type,
)
from verl_split.placement.hf_config import shape_from_config
from verl_split.placement.job import (
    Algorithm,
    Batch,
    FsdpBlock,
    Job,
    Model,
    RewardModel,
    Role,
    Rollout,
    Split,
    Trainer,
    TransferQueue,
)
from verl_split.placement.megatron_config import MODEL_PREFIX, ROLE_PREFIX, mesh_of, strategy_of
from verl_split.placement.model import (
    ACTOR_MINI,
    BATCH_KEYS,
    BATCH_RULES,
    CRITIC_MINI,
    DEFAULT_READY_TIMEOUT_S,
    TRAIN_BATCH,
)

#: The families whose rules are known, oldest first.
FAMILIES: tuple[str, ...] = compat.SUPPORTED_FAMILIES
#: Where each role's FSDP engine block may live, the newest family's first.
FSDP_BLOCKS: dict[str, tuple[str, ...]] = {
    "actor": ("fsdp_config",),
    "ref": ("fsdp_config",),
    "critic": ("fsdp", "model.fsdp_config"),
}
ROLLOUT = "actor_rollout_ref.rollout"
#: A rollout replica's sizes, and a Megatron model replica's.
REPLICA_SIZES = ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size")
MODEL_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
STORAGE = "transfer_queue.backend.SimpleStorage"
#: Where ``trainer_job`` keeps a trainer's job: (the config it was read from, the job).
TRAINER_JOB_ATTR = "_verl_split_job"
SHARED_ROLLOUT_KEY = "split_placement.shared_rollout"
READY_TIMEOUT_KEY = "split_placement.ready_timeout_s"
#: 0.7's ``trainer.use_legacy_worker_impl``: what its ``main_ppo.py`` takes (``TaskRunner.add_critic_worker``
#: raises ``ValueError`` on any other value, inside the TaskRunner, after Ray started).
LEGACY_WORKER_IMPLS = ("auto", "enable", "disable")
#: A model's ``model_dtype`` as verl reads it: ``PrecisionType.to_dtype`` (``verl/utils/torch_dtypes.py``,
#: 0.7.1 to 0.9.1) compares it with these lists, case and all, and raises on anything else in the worker; the
#: name each list's bytes are known by (``train_state._BYTES``).
MODEL_DTYPES = {
    "fp16": (16, "16", "fp16", "float16"),
    "fp32": (32, "32", "fp32", "float32"),
    "bf16": ("bf16", "bfloat16"),
}


def job_from_config(config: Any, family: str | None = None) -> Job:
    """The job of verl's trainer config; ``family``: whose rules apply ("0.7", "0.8", "0.9"), None the installed
    verl's (the newest without one). An interpolation that cannot be resolved is a ``PlacementError`` naming it."""
    asked = family or installed_family() or FAMILIES[-1]
    known = _known_family(asked)
    trainer = _trainer(config, known)
    rules = _rules(known, trainer)
    models = {"actor": _model(config, "actor", False), "critic": _model(config, "critic", True)}
    roles = {role: _role(config, role, rules, models.get(role, models["actor"])) for role in ROLE_PREFIX}
    return Job(
        family=known,
        asked_family=asked,
        rules=rules,
        actor=roles["actor"],
        ref=roles["ref"],
        critic=roles["critic"],
        rollout=_rollout(config),
        reward_model=_reward_model(config),
        trainer=trainer,
        algorithm=_algorithm(config),
        batch=_batch(config),
        transfer_queue=_transfer_queue(config),
        split=split_from_config(config),
        uses_reference=flag_key(config, "algorithm.use_kl_in_reward")
        or flag_key(config, "actor_rollout_ref.actor.use_kl_loss"),
    )


def _trainer(config: Any, family: str) -> Trainer:
    """The trainer's keys; those of one family's trainer read only where that trainer reads them."""
    use_v1 = flag_key(config, "trainer.use_v1", True)
    legacy_worker_impl, v1_mode, sync_step = "auto", "sync", 1
    if compat.family_in(family, compat.LEGACY_WORKERS):
        legacy_worker_impl = choice_key(config, "trainer.use_legacy_worker_impl", LEGACY_WORKER_IMPLS, "auto")
    if compat.family_in(family, compat.V1_TRAINER) and use_v1:
        # As the v1 trainer reads them (trainer_base.py PPOTrainer.__init__): its mode's own block's
        # parameter_sync_step, 1 where that block has none.
        v1_mode = text_key(config, "trainer.v1.trainer_mode", "sync")
        sync_step = count_key(config, f"trainer.v1.{v1_mode}.parameter_sync_step")
    steps = steps_key(config, "global_profiler.steps")
    return Trainer(
        nnodes=count_key(config, "trainer.nnodes"),
        n_gpus_per_node=count_key(config, "trainer.n_gpus_per_node"),
        use_v1=use_v1,
        legacy_worker_impl=legacy_worker_impl,
        v1_mode=v1_mode,
        parameter_sync_step=1 if sync_step is None else sync_step,
        profiler_steps=steps or (),
        critic_warmup=count_key(config, "trainer.critic_warmup") or 0,
    )


def _known_family(family: str) -> str:
    """The tested family whose rules apply to ``family``: itself, else the newest for a newer verl (0.10 reads as
    0.9, compared as versions: as strings "0.10" sorts below "0.9"), else the oldest."""
    if family in FAMILIES:
        return family
    return FAMILIES[-1] if Version(family) > Version(FAMILIES[-1]) else FAMILIES[0]


def as_job(config: Any, family: str | None = None) -> Job:
    """``config``'s job: the view itself when it is one already (built for ``family``, when given)."""
    if isinstance(config, Job):
        if family is not None and family not in (config.family, config.asked_family):
            raise ValueError(f"the job was read for verl {config.asked_family}'s rules, not {family}'s")
        return config
    return job_from_config(config, family)


def trainer_job(trainer: Any) -> Job:
    """The job of a verl trainer's ``config``, read on the first call and kept on the trainer for the later ones
    (the runtime asks it once a step): read again only if the trainer's config object is another."""
    kept = getattr(trainer, TRAINER_JOB_ATTR, None)
    if kept is not None and kept[0] is trainer.config:
        return kept[1]
    job = job_from_config(trainer.config)
    setattr(trainer, TRAINER_JOB_ATTR, (trainer.config, job))
    return job


def is_trainer_config(config: Any) -> bool:
    """A PPO trainer's config: it has verl's ``actor_rollout_ref`` and ``trainer`` sections."""
    return present_key(config, "actor_rollout_ref") and present_key(config, "trainer")


def split_from_config(config: Any) -> Split:
    """The ``split_placement`` block alone (what the runtime's switches read, without the rest of the job)."""
    if isinstance(config, Job):
        return config.split
    block = select_key(config, "split_placement")
    return Split(
        block=None if block is None else _plain(block),
        shared_rollout=_shared_rollout(select_key(config, SHARED_ROLLOUT_KEY, kind=SWITCH)),
        ready_timeout_s=_ready_timeout(config),
    )


def _shared_rollout(value: Any) -> bool | None:
    """``split_placement.shared_rollout``: None unset; true or false, in the spellings its variable
    ``VERL_SPLIT_SHARED_ROLLOUT`` takes too (hydra reads ``=1`` as a number and ``=yes`` as text)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | str):
        try:
            return settings.parse_switch(SHARED_ROLLOUT_KEY, str(value), False)
        except SettingsError:
            pass
    raise wrong_type(
        SHARED_ROLLOUT_KEY,
        value,
        "true or false",
        fix=f"Set +{SHARED_ROLLOUT_KEY}=true to put rollout replicas on the critic pool too, or false (or leave it "
        "out) to generate on the actor's pool only.",
    )


def _ready_timeout(config: Any) -> float | None:
    """``split_placement.ready_timeout_s``: seconds above 0; None unset."""
    seconds = number_key(config, READY_TIMEOUT_KEY)
    if seconds is not None and seconds <= 0:
        raise PlacementError(
            f"{READY_TIMEOUT_KEY} must be a number of seconds above 0, got {seconds:g}. "
            f"Leave it out for the default ({DEFAULT_READY_TIMEOUT_S:g}s)."
        )
    return seconds


def installed_family() -> str | None:
    version = compat.installed_version()
    if version is None:
        return None
    try:
        return compat.family_of(version)
    except Exception:  # an unparsable version: the newest rules
        return None


def ulysses_keys(role: str, rules: str) -> tuple[str, ...]:
    """The keys verl reads a role's Ulysses size from under ``rules`` (the module's docstring says why)."""
    prefix = ROLE_PREFIX[role]
    if rules == "legacy":
        return (f"{prefix}.ulysses_sequence_parallel_size",)
    block = f"{prefix}.{FSDP_BLOCKS[role][0]}.ulysses_sequence_parallel_size"
    return (block,) if role == "critic" else (f"{prefix}.ulysses_sequence_parallel_size", block)


def _rules(family: str, trainer: Trainer) -> str:
    if compat.family_in(family, compat.V1_TRAINER):
        rules = "v1" if trainer.use_v1 else "v0"
    elif compat.family_in(family, compat.ENGINE_WORKERS):
        rules = "v0"
    else:
        rules = "v0" if trainer.legacy_worker_impl == "disable" else "legacy"
    assert rules in BATCH_RULES
    return rules


def _model(config: Any, role: str, value_head: bool) -> Model:
    prefix = MODEL_PREFIX[role]
    path = text_key(config, f"{prefix}.path")
    return Model(
        prefix=prefix,
        path=path,
        shape=shape_from_config(text_key(config, f"{prefix}.hf_config_path") or path, value_head=value_head),
        lora_rank=max(count_key(config, f"{prefix}.lora_rank") or 0, count_key(config, f"{prefix}.lora.rank") or 0),
        lora_merge=flag_key(config, f"{prefix}.lora.merge"),
    )


def _role(config: Any, role: str, rules: str, model: Model) -> Role:
    prefix = ROLE_PREFIX[role]
    strategy = text_key(config, f"{prefix}.strategy", "") or ""
    mesh = mesh_of(config, role, model.shape) if strategy_of(config, role) == "megatron" else None
    dynamic = {"actor": f"{prefix}.use_dynamic_bsz", "ref": f"{prefix}.log_prob_use_dynamic_bsz"}.get(role)
    return Role(
        name=role,
        prefix=prefix,
        model=model,
        strategy=strategy,
        mesh=mesh,
        megatron_size=_product(config, f"{prefix}.megatron", MODEL_SIZES) if strategy == "megatron" else 1,
        fsdp_blocks=tuple(_fsdp(config, f"{prefix}.{block}") for block in FSDP_BLOCKS[role]),
        ulysses=tuple((key, count_key(config, key)) for key in ulysses_keys(role, rules)),
        ulysses_role_key=count_key(config, f"{prefix}.ulysses_sequence_parallel_size"),
        dynamic_bsz=flag_key(config, dynamic) if dynamic else False,
    )


def _fsdp(config: Any, block: str) -> FsdpBlock:
    return FsdpBlock(
        key=block,
        present=present_key(config, block),
        size=count_key(config, f"{block}.fsdp_size"),
        model_dtype=_model_dtype(config, f"{block}.model_dtype"),
        param_offload=flag_key(config, f"{block}.param_offload"),
        optimizer_offload=flag_key(config, f"{block}.optimizer_offload"),
        infer_dynamic_bsz=flag_key(config, f"{block}.use_dynamic_bsz", True),
        infer_micro_batch=count_key(config, f"{block}.infer_micro_batch_size_per_gpu"),
    )


def _model_dtype(config: Any, key: str) -> str:
    """``key`` as verl's workers read it (``MODEL_DTYPES``), by the name of its list; unset: fp32, what a
    training engine loads (``FSDPEngine._build_module``)."""
    value = choice_key(config, key, [spelling for spellings in MODEL_DTYPES.values() for spelling in spellings])
    return next((name for name, spellings in MODEL_DTYPES.items() if value in spellings), "fp32")


def _rollout(config: Any) -> Rollout:
    bucket = number_key(config, f"{ROLLOUT}.checkpoint_engine.update_weights_bucket_megabytes")
    temperature = number_key(config, f"{ROLLOUT}.temperature")
    return Rollout(
        name=text_key(config, f"{ROLLOUT}.name"),
        mode=text_key(config, f"{ROLLOUT}.mode"),
        tp=count_key(config, f"{ROLLOUT}.tensor_model_parallel_size"),
        dp=count_key(config, f"{ROLLOUT}.data_parallel_size"),
        pp=count_key(config, f"{ROLLOUT}.pipeline_model_parallel_size"),
        n=count_key(config, f"{ROLLOUT}.n"),
        temperature=1.0 if temperature is None else temperature,
        gpu_memory_utilization=number_key(config, f"{ROLLOUT}.gpu_memory_utilization"),
        max_num_seqs=count_key(config, f"{ROLLOUT}.max_num_seqs"),
        full_determinism=flag_key(config, f"{ROLLOUT}.full_determinism"),
        log_prob_dynamic_bsz=flag_key(config, f"{ROLLOUT}.log_prob_use_dynamic_bsz"),
        bucket_mb=2048.0 if bucket is None else bucket,
        # verl's own default where unset (CheckpointEngineConfig.backend in workers/config/rollout.py).
        checkpoint_backend=text_key(config, f"{ROLLOUT}.checkpoint_engine.backend", "naive"),
        hybrid=flag_key(config, "actor_rollout_ref.hybrid_engine", True),
    )


def _reward_model(config: Any) -> RewardModel:
    rm = "reward.reward_model"
    return RewardModel(
        enabled=flag_key(config, f"{rm}.enable"),
        own_pool=flag_key(config, f"{rm}.enable_resource_pool"),
        replica=_product(config, f"{rm}.rollout", REPLICA_SIZES),
    )


def _algorithm(config: Any) -> Algorithm:
    enable = flag_key(config, "critic.enable") if present_key(config, "critic.enable") else None
    inflight = count_key(config, "algorithm.filter_groups.max_inflight_gen_batches")
    return Algorithm(
        critic_enable=enable,
        adv_estimator=text_key(config, "algorithm.adv_estimator", "gae"),
        filter_groups=flag_key(config, "algorithm.filter_groups.enable"),
        rollout_bypass=flag_key(config, "algorithm.rollout_correction.bypass_mode"),
        max_inflight_gen_batches=inflight if inflight is not None and inflight > 0 else 1,
    )


def _batch(config: Any) -> Batch:
    return Batch(
        values=tuple((key, count_key(config, key)) for key in BATCH_KEYS),
        followers=_followers(config),
        train_batch_set=present_key(config, TRAIN_BATCH),
        gen_batch_size=count_key(config, "data.gen_batch_size"),
        max_prompt_length=count_key(config, "data.max_prompt_length"),
        max_response_length=count_key(config, "data.max_response_length"),
    )


def _transfer_queue(config: Any) -> TransferQueue:
    units = count_key(config, f"{STORAGE}.num_data_storage_units")
    return TransferQueue(
        backend=text_key(config, "transfer_queue.backend.storage_backend", "SimpleStorage"),
        capacity=count_key(config, f"{STORAGE}.total_storage_size"),
        units=units if units is not None and units > 0 else 1,
    )


def _followers(config: Any) -> tuple[tuple[str, str], ...]:
    """Keys whose value is an interpolation of another batch key (verl's critic mini-batch follows the actor's)."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(config, DictConfig):
        return ()
    found = []
    for key in (CRITIC_MINI,):
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(config, parent)
        if not isinstance(node, DictConfig) or leaf not in node or not OmegaConf.is_interpolation(node, leaf):
            continue
        raw = OmegaConf.to_container(node, resolve=False).get(leaf)
        if isinstance(raw, str) and ACTOR_MINI in raw:
            found.append((key, ACTOR_MINI))
    return tuple(found)


def _plain(value: Any) -> Any:
    """An OmegaConf container as plain lists and dicts, interpolations resolved; anything else as is."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _product(config: Any, block: str, keys: tuple[str, ...]) -> int:
    """The product of ``block``'s sizes ``keys``, unset sizes 1."""
    total = 1
    for key in keys:
        size = count_key(config, f"{block}.{key}")
        total *= 1 if size is None else size
    return total
