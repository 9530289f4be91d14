"""Shared rollout on ``RayPPOTrainer`` (0.8, 0.9's ``trainer.use_v1=false``, verl's neo branch): what its path
needs beyond the coordinator both trainers share (``coordinator.start`` / ``wire``), called by ``hooks.py``'s
``wrap_init_workers`` and ``wrap_get_client``."""

from __future__ import annotations

from typing import Any

from verl_split.core.citations import cite
from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError


def hybrid_sync_in_process(config: Any) -> None:
    """``RayPPOTrainer``: verl's own manager, which ``init_workers`` builds from the config after the actor's
    workers took their engine from it, syncs the actor pool's replicas in-process (``naive``), as the v1
    trainer forces for its own (``verl/trainer/ppo/v1/trainer_base.py`` ``_setup``): the actor worker's
    hybrid replicas have no checkpoint-engine workers to receive a transfer (``checkpoint_engine/base.py``
    ``build_process_group``)."""
    from omegaconf import open_dict

    with open_dict(config.actor_rollout_ref.rollout.checkpoint_engine) as engine:
        engine.backend = "naive"


def restore_weight_transfer(config: Any, backend: str) -> None:
    """The config says again what the actor's workers run (``configure_weight_transfer``'s ``backend``)."""
    from omegaconf import open_dict

    with open_dict(config.actor_rollout_ref.rollout.checkpoint_engine) as engine:
        engine.backend = backend


def check_ray_trainer(trainer: Any) -> None:
    """Refuse a ``RayPPOTrainer`` subclass with a loop of its own: shared rollout joins the stock ``fit``'s.

    verl's asynchronous recipes (``verl/experimental/fully_async_policy``, ``one_step_off_policy``) subclass
    ``RayPPOTrainer`` and override ``fit``, scheduling their rollout replicas and their weight sync themselves,
    as the v1 trainer's non-``sync`` modes do (``placement.verl_config.check_shared_rollout_run``).
    """
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from verl_split.placement.shared import SWITCH_OFF_HINT
    from verl_split.runtime.overlap.trainers import defining_class

    owner = defining_class(type(trainer), "fit")
    if owner is not RayPPOTrainer:
        raise SharedRolloutError(
            f"shared rollout runs on verl's RayPPOTrainer and its own fit(); {type(trainer).__name__} overrides "
            f"fit() ({owner.__module__ if owner else '?'}), so its loop schedules the rollout replicas and their "
            f"weight sync itself. Run the stock trainer (python -m verl.trainer.main_ppo), or {SWITCH_OFF_HINT}."
        )


def never_started(trainer: Any) -> SharedRolloutError:
    from verl_split.placement.shared import SWITCH_OFF_HINT

    return SharedRolloutError(
        f"shared rollout: {type(trainer).__name__}.init_workers() never asked its LLMServerManager for a client "
        f"({cite('trainer_gets_client')} hands one to the agent loop), where verl-split starts the critic "
        "pool's rollout replicas; this verl builds its rollout another way, which verl-split has not been adapted "
        f"to. Install a tested verl, or {SWITCH_OFF_HINT}."
    )


def report_to_tracker(trainer: Any) -> None:
    """Add the step's shared-rollout metrics to the step's record in verl's tracker.

    ``BothPoolsCheckpointManager`` leaves them in ``trainer._pending_sync_metrics``, which the v1 trainer merges
    into the step's metrics itself (``trainer_base.py`` ``_consume_sync_metrics``); ``RayPPOTrainer.fit`` has no
    such step, so they join the next training step's record (``timing_s/step`` marks one: not a validation
    record, which ``fit`` logs apart before training) on its way to the tracker.
    """
    from verl_split.runtime.metrics import tracking

    def pending(record: dict) -> dict:
        if "timing_s/step" not in record:
            return {}
        metrics = getattr(trainer, "_pending_sync_metrics", None) or {}
        trainer._pending_sync_metrics = {}
        return metrics

    tracking.register_source(pending)
