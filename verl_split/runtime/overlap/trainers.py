"""What differs between verl's trainers, for the overlaps: one adapter per trainer and phase.

``V1Adapter`` / ``V0Adapter`` tell the update overlap (``updates.py``) where a trainer's
metrics go and which of its methods holds the stock step; ``V1Prep`` / ``V0Prep`` add what
the preparation overlap (``prep.py``) needs: how to snapshot the step's batch, how
to call values on it, and when a trainer must run the preparation stock. The seams in
``seams.py`` names one adapter per trainer class it wraps.
"""

from __future__ import annotations

from typing import Any

from verl_split.core import metric_names as names
from verl_split.placement.job_config import trainer_job
from verl_split.plugin.args import get_argument


def batch_arg(args: tuple, kwargs: dict) -> Any:
    """The step's batch, the first parameter of every per-phase trainer method."""
    return get_argument(args, kwargs, 0, "batch", None)


def defining_class(cls: type, method: str) -> type | None:
    """The class in ``cls``'s MRO whose own dict holds ``method`` (None if none does).

    Looked up in the class dicts: verl-split's wrappers are descriptors, so comparing what
    ``getattr`` returns would compare two freshly bound objects.
    """
    return next((c for c in cls.__mro__ if method in vars(c)), None)


class TrainerAdapter:
    """What differs between verl's trainers: where metrics go and what a stock step is."""

    #: the class whose stock step runs critic -> actor (see ``runs_stock_step``)
    trainer_class: type
    #: the method of ``trainer_class`` holding that step; an override means an unknown order
    step_method: str

    def runs_stock_step(self, trainer: Any) -> bool:
        # Looked up in the class dicts: fit itself may carry verl-split's wrapper (deferral_hooks.py).
        return defining_class(type(trainer), self.step_method) is self.trainer_class

    def actor_updates_this_step(self, trainer: Any) -> bool:
        # The very condition both verl trainers use before calling _update_actor.
        return trainer_job(trainer).trainer.critic_warmup <= trainer.global_steps

    def pools(self, trainer: Any) -> tuple[str | None, str | None]:
        """(actor pool, critic pool) names from the trainer's resource pool mapping."""
        from verl.trainer.ppo.utils import Role

        mapping = trainer.resource_pool_manager.mapping
        actor = next((mapping[r] for r in (Role.ActorRollout, Role.ActorRolloutRef, Role.Actor) if r in mapping), None)
        return actor, mapping.get(Role.Critic)

    def ref_pool(self, trainer: Any) -> str | None:
        """The resource pool of a reference worker group of its own (``Role.RefPolicy``), if the run has one."""
        from verl.trainer.ppo.utils import Role

        if not getattr(trainer, "use_reference_policy", False):
            return None
        return trainer.resource_pool_manager.mapping.get(Role.RefPolicy)

    def reward_pool(self, trainer: Any) -> str | None:
        """The resource pool of a reward model that runs in the trainer's step, if any."""
        from verl.trainer.ppo.utils import Role

        return trainer.resource_pool_manager.mapping.get(Role.RewardModel)

    def pool_sizes(self, trainer: Any) -> dict[str, float]:
        """``split/actor_pool_gpus`` and ``split/critic_pool_gpus``: the layout this run trains on."""
        spec = getattr(trainer.resource_pool_manager, "resource_pool_spec", {}) or {}
        sizes = {}
        for role, pool in zip(("actor", "critic"), self.pools(trainer), strict=True):
            if pool in spec:
                sizes[names.pool_gpus(role)] = float(sum(spec[pool]))
        return sizes

    def private_metrics_call(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, dict | None]:
        """The arguments for the actor's call, with its own metrics dict if the trainer passes one."""
        return args, kwargs, None

    def merge_metrics(self, args: tuple, kwargs: dict, private: dict | None) -> None:
        """Put what the actor's call wrote into its private metrics dict where stock would have."""

    def report(self, result: Any, args: tuple, kwargs: dict, split_metrics: dict[str, float]) -> None:
        raise NotImplementedError

    # -- the deferred critic update (deferral.py) ------------------------------------------
    #: Methods whose stock version the deferral relies on: it joins at their entry or exit.
    defer_methods: tuple[str, ...] = ("fit", "_save_checkpoint", "_compute_values")

    def why_not_defer(self, trainer: Any) -> str:
        """Empty when this step's critic update may run on into the next step, else the reason it may not."""
        if trainer.global_steps >= trainer.total_training_steps:
            return "this is the run's last step (nothing follows to hide the update behind)"
        for method in self.defer_methods:
            owner = defining_class(type(trainer), method)
            if owner is not self.trainer_class:
                who = f"{owner.__name__} overrides" if owner else f"{type(trainer).__name__} has no"
                return f"{who} {method}(), where the deferred update is joined"
        if trainer_job(trainer).trainer.profiler_steps:
            # fit's profiling calls every worker group at the end of a profiled step: the critic's
            # stop_profile would queue behind its own update (Ray runs an actor's calls in order).
            return "verl's profiler (global_profiler.steps) calls the critic's workers at the end of each step"
        return ""

    def placeholder(self, args: tuple, kwargs: dict) -> Any:
        """What the stock ``_update_critic`` call returns to ``fit`` while its update runs on."""
        raise NotImplementedError

    def critic_metrics(self, result: Any, private: dict | None, args: tuple, kwargs: dict) -> dict:
        """The critic's metrics exactly as stock ``fit`` would have added them to the step's metrics."""
        raise NotImplementedError

    def kept_batch(self, args: tuple, kwargs: dict) -> tuple[frozenset, str] | None:
        """(keys, partition) of stored data the critic's workers read while the update runs, if any."""
        return None


class V1Adapter(TrainerAdapter):
    """``verl/trainer/ppo/v1/trainer_base.py`` ``PPOTrainer``: ``_update_*(batch, metrics)``."""

    step_method = "_step_once"

    def __init__(self, trainer_class: type) -> None:
        self.trainer_class = trainer_class

    @staticmethod
    def _metrics_index(args: tuple, kwargs: dict) -> int | str:
        return "metrics" if "metrics" in kwargs else 1

    def private_metrics_call(self, args, kwargs):
        where, private = self._metrics_index(args, kwargs), {}
        if where == "metrics":
            return args, {**kwargs, "metrics": private}, private
        return (*args[:where], private, *args[where + 1 :]), kwargs, private

    def merge_metrics(self, args, kwargs, private):
        if private:
            self._metrics(args, kwargs).update(private)

    def _metrics(self, args, kwargs) -> dict:
        where = self._metrics_index(args, kwargs)
        return kwargs["metrics"] if where == "metrics" else args[where]

    def report(self, result, args, kwargs, split_metrics):
        self._metrics(args, kwargs).update(split_metrics)

    def why_not_defer(self, trainer):
        if getattr(trainer, "trainer_mode", "sync") != "sync":
            return f"verl's v1 trainer runs in {trainer.trainer_mode!r} mode; the deferral is built for 'sync'"
        if getattr(trainer, "parameter_sync_step", 1) != 1:
            # step() folds several _step_once calls into one record; each would join the previous one's critic.
            return "trainer.v1 parameter_sync_step > 1 runs several updates per step"
        return super().why_not_defer(trainer)

    def placeholder(self, args, kwargs):
        return batch_arg(args, kwargs)  # stock returns the batch it was given

    def critic_metrics(self, result, private, args, kwargs):
        # PPOTrainer.step() folds each _step_once's metrics through verl's MetricsAggregator, weighted
        # by the batch's non-padding samples (verl/trainer/ppo/v1/trainer_base.py step()): the very
        # same reduction, on the critic's metrics alone (it reduces each key on its own).
        from verl.trainer.ppo.v1.utils import MetricsAggregator

        batch = batch_arg(args, kwargs)
        samples = sum(not tag.get("is_padding", False) for tag in batch.tags)
        aggregator = MetricsAggregator()
        aggregator.add_step_metrics(private or {}, sample_count=samples)
        return aggregator.get_aggregated_metrics()

    def kept_batch(self, args, kwargs):
        # The critic's workers read the step's fields from TransferQueue inside their call; fit clears
        # the step's keys at its end (tq.kv_clear): that clear must wait for the update.
        batch = batch_arg(args, kwargs)
        return frozenset(batch.keys), batch.partition_id


class V0Adapter(TrainerAdapter):
    """``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer``: ``_update_*(batch)`` return a DataProto
    whose ``meta_info["metrics"]`` ``fit`` reduces into the step's metrics."""

    step_method = "fit"

    def __init__(self, trainer_class: type) -> None:
        self.trainer_class = trainer_class

    def report(self, result, args, kwargs, split_metrics):
        # Set back, not updated in place: neo's NeoProto meta_info is a view over stored refs, whose items read
        # as copies (verl/experimental/neoproto/views/data_proto.py LocalProxy); the same on the classic DataProto.
        result.meta_info["metrics"] = {**(result.meta_info.get("metrics", None) or {}), **split_metrics}

    def placeholder(self, args, kwargs):
        # fit reduces `critic_output.meta_info["metrics"]` into the step's metrics at once
        # (verl/trainer/ppo/ray_trainer.py fit): an empty record; the real one joins the step's log.
        from verl import DataProto

        return DataProto.from_single_dict(data={}, meta_info={"metrics": {}})

    def critic_metrics(self, result, private, args, kwargs):
        from verl.utils.metric import reduce_metrics  # what fit applies to critic_output

        return reduce_metrics(result.meta_info["metrics"])


class V0Prep(V0Adapter):
    """``RayPPOTrainer`` (every family): ``_compute_*(batch)`` are pure and return new DataProtos;
    ``fit`` merges them into the step's batch in place (``batch.union`` returns ``self``)."""

    def snapshot(self, batch: Any) -> Any:
        # New TensorDict and dicts over the same tensors: fit's unions add keys to the step's
        # batch while the critic's dispatch iterates over this one. select() without key
        # lists would hand back the same TensorDict.
        return batch.select(
            batch_keys=list(batch.batch.keys()),
            non_tensor_batch_keys=list(batch.non_tensor_batch),
            meta_info_keys=list(batch.meta_info),
        )

    def same_batch(self, launched: Any, batch: Any) -> bool:
        if launched is batch:  # the classic DataProto: fit's unions add keys to the step's batch in place
            return True
        # neo's NeoProto: union returns a new view over the same stored refs plus the other's
        # (verl/experimental/neoproto/neo.py NeoProto.union): the same batch holds every launched ref.
        launched_refs, refs = getattr(launched, "ref_table", None), getattr(batch, "ref_table", None)
        if launched_refs is None or refs is None or len(launched) != len(batch):
            return False
        return all(key in refs and refs[key] is launched_refs[key] for key in launched_refs)

    def values_call(self, snapshot: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return (snapshot,), {}

    def values_result(self, step: Any, result: Any, args: tuple, kwargs: dict) -> Any:
        return result

    def why_not(self, trainer: Any) -> str:
        return ""

    def is_step_reward(self, batch: Any) -> bool:
        """The step's own reward call, not REMAX's baseline or validation's: only the step's batch
        carries ``global_token_num``, which ``fit`` sets after balancing, just before the reward."""
        return "global_token_num" in batch.meta_info

    def why_not_during_reward(self, trainer: Any, actor_pool: str | None) -> str:
        owner = defining_class(type(trainer), "_compute_reward_colocate")
        if owner is not self.trainer_class:
            return f"{owner.__name__} overrides _compute_reward_colocate()"
        if trainer_job(trainer).algorithm.rollout_bypass:
            return "verl's bypass mode (algorithm.rollout_correction.bypass_mode) computes no old_log_prob"
        pool = self.reward_pool(trainer)
        if pool is None or pool == actor_pool:
            return f"the reward model shares resource pool {pool!r} with the actor"
        return ""

    def actor_methods(self, trainer: Any) -> list[str]:
        methods = ["_compute_old_log_prob"]
        if getattr(trainer, "use_reference_policy", False):
            methods.append("_compute_ref_log_prob")
        return methods


class V1Prep(V1Adapter):
    """v1 ``PPOTrainer``: ``_compute_*(batch, metrics)`` take a ``KVBatchMeta`` whose data lives in
    TransferQueue, write their fields there, and return the (possibly new) meta."""

    def snapshot(self, batch: Any) -> Any:
        # Every compute method updates batch.extra_info; KVBatchMeta deep-copies tags and
        # extra_info on construction, so the critic's request cannot race old_log_prob's.
        return type(batch)(
            keys=list(batch.keys),
            tags=batch.tags,
            partition_id=batch.partition_id,
            fields=None if batch.fields is None else list(batch.fields),
            extra_info=dict(batch.extra_info or {}),
        )

    def same_batch(self, launched: Any, batch: Any) -> bool:
        # old_log_prob returns the meta of its TransferQueue put: the same samples, a new object.
        return list(launched.keys) == list(batch.keys) and launched.partition_id == batch.partition_id

    def values_call(self, snapshot: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        args, kwargs, _ = self.private_metrics_call(args, kwargs)
        return (snapshot, *args[1:]), {k: v for k, v in kwargs.items() if k != "batch"}

    def values_result(self, step: Any, result: Any, args: tuple, kwargs: dict) -> Any:
        # Stock returns its input after adding the critic's request flags to its extra_info.
        batch = batch_arg(args, kwargs)
        added = {k: v for k, v in (step.snapshot.extra_info or {}).items() if step.extra_info_before.get(k) != v}
        if batch.extra_info is None:
            batch.extra_info = {}
        batch.extra_info.update(added)
        return batch

    def why_not(self, trainer: Any) -> str:
        if getattr(trainer, "ref_in_actor", False) and getattr(trainer, "use_reference_policy", False):
            # verl/trainer/ppo/v1/trainer_base.py _compute_ref_log_prob sets no_lora_adapter in the
            # shared extra_info, which stock then sends along with the critic's request
            # (TrainingWorker.infer_batch turns the critic's adapter off). A snapshot taken
            # before ref would not carry it, so the critic would compute other values.
            return (
                "the reference policy runs inside the LoRA actor (ref_in_actor), and stock verl passes its "
                "no_lora_adapter flag on to the critic's values call"
            )
        return ""
