"""The overlaps' seams: the updates (``updates.py``), the preparation (``prep.py``), the critic's update
deferred into the next step (``deferral.py``) and 0.7's legacy critic (``legacy.py``).

The wrappers of a trainer's methods are built per trainer class with that trainer's adapter
(``trainers.py``: where a trainer's metrics go, what a stock step is). Each seam's ``needs`` lists what
it and the code it runs read of verl, for the preflight.
"""

from __future__ import annotations

from verl_split.core import compat
from verl_split.plugin.seam import Seam, Wrap

_OVERLAP = "verl_split.runtime.overlap."
_UPDATES = _OVERLAP + "update_hooks:"
_PREP = _OVERLAP + "prep_hooks:"
_DEFER = _OVERLAP + "deferral_hooks:"
_LEGACY = _OVERLAP + "legacy:"
_ADAPTERS = _OVERLAP + "trainers:"
_STREAM = _OVERLAP + "stream_values_v1:"
V1 = "verl.trainer.ppo.v1.trainer_base"
V0 = "verl.trainer.ppo.ray_trainer"
_V1 = "PPOTrainer."  # verl/trainer/ppo/v1/trainer_base.py
_V0 = "RayPPOTrainer."  # verl/trainer/ppo/ray_trainer.py
#: trainers.py and updates.py: what the update overlap reads of a trainer.
_UPDATE_NEEDS = ("config", "global_steps", "critic_wg", "resource_pool_manager")


def _updates(cls: str, adapter: str, critic_wrapper: str = _UPDATES + "make_update_critic_wrapper") -> tuple:
    return (
        Wrap(f"{cls}._update_critic", critic_wrapper, adapter=_ADAPTERS + adapter),
        Wrap(f"{cls}._update_actor", _UPDATES + "make_update_actor_wrapper", adapter=_ADAPTERS + adapter),
    )


def _prep(cls: str, adapter: str) -> tuple:
    return (
        Wrap(f"{cls}._compute_old_log_prob", _PREP + "make_actor_compute_wrapper", adapter=_ADAPTERS + adapter),
        Wrap(f"{cls}._compute_ref_log_prob", _PREP + "make_actor_compute_wrapper", adapter=_ADAPTERS + adapter),
        Wrap(f"{cls}._compute_values", _PREP + "make_values_wrapper", adapter=_ADAPTERS + adapter),
    )


SEAMS: tuple[Seam, ...] = (
    # The actor's and the critic's updates at once.
    Seam(
        "overlap_v1",
        V1,
        "split",
        "updates",
        compat.V1_TRAINER,
        needs=(
            f"{_V1}_update_critic(batch@0, metrics@1)",
            f"{_V1}_update_actor(batch@0, metrics@1)",
            f"{_V1}_step_once",
            *(_V1 + a for a in _UPDATE_NEEDS),
            "verl.workers.engine_workers:TrainingWorker.train_mini_batch",
        ),
        wraps=_updates("PPOTrainer", "V1Adapter"),
    ),
    Seam(
        "overlap_v0",
        V0,
        "split",
        "updates",
        compat.ENGINE_WORKERS,
        needs=(
            f"{_V0}_update_critic(batch@0)",
            f"{_V0}_update_actor(batch@0)",
            f"{_V0}fit",
            *(_V0 + a for a in _UPDATE_NEEDS),
            "verl.workers.engine_workers:TrainingWorker.train_mini_batch",
        ),
        wraps=_updates("RayPPOTrainer", "V0Adapter"),
    ),
    Seam(
        "overlap_legacy",
        V0,
        "split",
        "updates",
        compat.LEGACY_WORKERS,
        needs=(
            f"{_V0}_update_critic(batch@0)",
            f"{_V0}_update_actor(batch@0)",
            f"{_V0}fit",
            *(_V0 + a for a in _UPDATE_NEEDS),
            "verl.protocol:DataProto",
        ),
        wraps=_updates("RayPPOTrainer", "V0Adapter", _LEGACY + "make_update_critic_wrapper"),
    ),
    *(
        # 0.7's two legacy critics: FSDP's, and Megatron's (main_ppo.py's TaskRunner.add_critic_worker picks it
        # for every critic.strategy=megatron run, whatever use_legacy_worker_impl says).
        Seam(
            name,
            target,
            "split",
            "updates",
            compat.LEGACY_WORKERS,
            needs=("CriticWorker.update_critic", "verl.single_controller.base.decorator:MAGIC_ATTR"),
            apply=_LEGACY + "defer_critic_dispatch",
        )
        for name, target in (
            ("legacy_critic_worker", "verl.workers.fsdp_workers"),
            ("legacy_megatron_critic_worker", "verl.workers.megatron_workers"),
        )
    ),
    Seam(
        "legacy_dispatch",
        "verl.single_controller.ray.base",
        "split",
        "updates",
        compat.LEGACY_WORKERS,
        needs=("func_generator(blocking@5)",),
        wraps=(Wrap("func_generator", _LEGACY + "wrap_func_generator"),),
    ),
    # values beside old_log_prob + ref.
    Seam(
        "prep_v1",
        V1,
        "split",
        "prep",
        compat.V1_TRAINER,
        needs=(
            f"{_V1}_compute_old_log_prob(batch@0, metrics@1)",
            f"{_V1}_compute_ref_log_prob(batch@0, metrics@1)",
            f"{_V1}_compute_values(batch@0, metrics@1)",
            f"{_V1}_step_once",
            f"{_V1}ref_in_actor",
            f"{_V1}use_reference_policy",
            f"{_V1}global_steps",
        ),
        wraps=_prep("PPOTrainer", "V1Prep"),
    ),
    Seam(
        "prep_v0",
        V0,
        "split",
        "prep",
        compat.ANY,
        needs=(
            f"{_V0}_compute_old_log_prob(batch@0)",
            f"{_V0}_compute_ref_log_prob(batch@0)",
            f"{_V0}_compute_values(batch@0)",
            # A reward model colocated in the step: verl 0.7.1+ (0.7.0 scores it inside fit, ray_trainer.py; there
            # the preparation starts at old_log_prob's entry, as with no reward model).
            f"?{_V0}_compute_reward_colocate(batch@0)",
            f"{_V0}fit",
            f"{_V0}use_reference_policy",
            f"{_V0}global_steps",
            "verl.protocol:DataProto.select(batch_keys, non_tensor_batch_keys, meta_info_keys)",
        ),
        wraps=(
            *_prep("RayPPOTrainer", "V0Prep"),
            Wrap(
                "RayPPOTrainer._compute_reward_colocate",
                _PREP + "make_reward_wrapper",
                adapter=_ADAPTERS + "V0Prep",
                optional=True,
            ),
        ),
    ),
    # The critic's update runs on into the next step: where it is joined.
    Seam(
        "deferred_critic_v1",
        V1,
        "split",
        "defer_critic",
        compat.V1_TRAINER,
        needs=(
            f"{_V1}fit",
            f"{_V1}_save_checkpoint",
            f"{_V1}_compute_reward_colocate(batch@0)",
            f"{_V1}_compute_values(batch@0, metrics@1)",
            f"{_V1}total_training_steps",
            f"?{_V1}trainer_mode",
            f"?{_V1}parameter_sync_step",
            "verl.trainer.ppo.v1.utils:MetricsAggregator.add_step_metrics(metrics@0, sample_count)",
            "verl.trainer.ppo.v1.utils:MetricsAggregator.get_aggregated_metrics",
        ),
        wraps=(
            Wrap("PPOTrainer.fit", _DEFER + "wrap_fit"),
            Wrap("PPOTrainer._save_checkpoint", _DEFER + "wrap_save_checkpoint"),
            Wrap(
                "PPOTrainer._compute_reward_colocate",
                _DEFER + "make_reward_join_wrapper",
                adapter=_ADAPTERS + "V1Adapter",
            ),
        ),
    ),
    Seam(
        "deferred_critic_v0",
        V0,
        "split",
        "defer_critic",
        compat.ANY,
        needs=(
            f"{_V0}fit",
            f"{_V0}_save_checkpoint",
            f"{_V0}_compute_values(batch@0)",
            f"{_V0}total_training_steps",
            "verl.utils.metric:reduce_metrics",
            "verl.protocol:DataProto.from_single_dict(data, meta_info)",
        ),
        wraps=(
            Wrap("RayPPOTrainer.fit", _DEFER + "wrap_fit"),
            Wrap("RayPPOTrainer._save_checkpoint", _DEFER + "wrap_save_checkpoint"),
        ),
    ),
    # v1 clears a step's TransferQueue keys at its end; the deferred update still reads them.
    Seam(
        "deferred_critic_tq",
        "transfer_queue",
        "split",
        "defer_critic",
        compat.V1_TRAINER,
        needs=("kv_clear(keys@0, partition_id@1)",),
        wraps=(Wrap("kv_clear", _DEFER + "wrap_kv_clear"),),
    ),
    # Values streamed into generation's tail (v1, sync mode): the lane starts where the step's prompts are
    # submitted; generation ends when the replay buffer's sample returns; the stock values call sees the critic
    # through stream_values_v1's proxy.
    Seam(
        "stream_values_v1",
        V1,
        "split",
        "stream_values",
        compat.STREAM_VALUES_V1,
        needs=(
            f"{_V1}prepare_step",
            f"{_V1}step",
            f"{_V1}_step_once",
            f"{_V1}_compute_values(batch@0, metrics@1)",
            f"{_V1}critic_wg",
            f"{_V1}use_critic",
            f"?{_V1}trainer_mode",
            f"?{_V1}parameter_sync_step",
            "transfer_queue:kv_list(partition_id)",
            "transfer_queue:KVBatchMeta(keys, tags, partition_id, fields, extra_info)",
            "verl.utils.config:omega_conf_to_dataclass",
            "verl.workers.engine_workers:TrainingWorker.infer_batch",
        ),
        wraps=(Wrap("PPOTrainer.prepare_step", _STREAM + "make_prepare_step_wrapper", adapter=_ADAPTERS + "V1Prep"),),
    ),
    Seam(
        "stream_values_v1_sample",
        "verl.trainer.ppo.v1.replay_buffer",
        "split",
        "stream_values",
        compat.STREAM_VALUES_V1,
        needs=("ReplayBuffer.sample(global_steps@0, partition_id@1, batch_size@2)",),
        wraps=(Wrap("ReplayBuffer.sample", _STREAM + "wrap_sample"),),
    ),
)
