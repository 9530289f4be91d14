"""Shared rollout's wrappers of verl's trainers; what they start is ``coordinator.py``'s, the same for both.

verl 0.9's v1 trainer (``trainer.use_v1=true``, ``trainer_mode=sync``), ``trainer/ppo/v1/trainer_base.py``:

* ``wrap_setup`` -- ``PPOTrainer._setup``: before it, the actor's checkpoint engine is chosen (the actor
  worker class takes the config inside ``_setup``); after it (verl's replicas, load balancer and checkpoint
  manager exist, and ``init`` has not yet called ``on_init_end``, which pushes the first weights), the
  critic pool's replicas start and join them (``coordinator.attach``).

``RayPPOTrainer`` (0.8, 0.9 with ``trainer.use_v1=false``, verl's neo branch), ``trainer/ppo/ray_trainer.py``
(what its path adds to the coordinator is below the wrappers: the refusal of a loop of its own, the sync of the
actor pool's replicas in-process, the metrics to verl's tracker):

* ``wrap_init_workers`` -- ``RayPPOTrainer.init_workers``: the same choice of engine before it; after it
  (verl's ``CheckpointEngineManager`` exists and ``fit`` has not pushed the first weights yet), the
  critic pool's replicas join the weight sync (``coordinator.wire``), and their metrics go to verl's
  tracker (``RayPPOTrainer`` has no ``_pending_sync_metrics``).
* ``wrap_get_client`` -- ``LLMServerManager.get_client`` (``workers/rollout/llm_server.py``): ``init_workers``
  hands its balancer to the agent loop's workers through the client it asks for here, right after
  creating the manager; so the critic pool's replicas start and verl-split's balancer takes the old one's
  place here, before any client holds it (``coordinator.start``); and verl's own ``CheckpointEngineManager``,
  built next from the config, is given ``naive`` (its in-process sync for the actor pool's replicas), as the
  v1 trainer gives its own (``trainer_base.py`` ``_setup``). Only for a manager of a trainer inside
  ``init_workers`` with shared rollout on; every other call is verl's.

Both trainers:

* ``wrap_validate`` -- ``_validate``: the requests of a validation pass do not count in the next step's
  ``split/critic_pool_rollout_share``, and a late join decided during the pass does not ask the rate model
  (``both_pools.BothPoolsCheckpointManager.validating``).

Only when shared rollout is on; the run was validated before Ray started (the planner). ``coordinator.py``
imports verl modules that not every release has (its balancer's module moved in 0.9.1), so it is imported
only once the config asks for shared rollout: a run with it off never imports them. Nothing of this feature's
is imported at this module's top either: it is loaded inside the import of ``llm_server``, which
``both_pools``' balancer imports in turn.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verl_split.core.citations import cite

if TYPE_CHECKING:
    from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError


@dataclass(eq=False)  # found by identity: two entries of one trainer are two calls
class _Initialising:
    """A ``RayPPOTrainer`` inside ``init_workers`` with shared rollout on, and what ``wrap_get_client`` started."""

    trainer: Any
    started: Any = None


#: The trainers inside init_workers now: an entry lives exactly as long as its init_workers call (removed in a
#: ``finally``), so what one started never reaches another, even one that a failed trainer's memory was given to.
_initialising: list[_Initialising] = []


def _shared_rollout(trainer: Any) -> bool:
    """Shared rollout asked for by the trainer's job (its ``split_placement`` block) or the environment."""
    from verl_split.placement import shared_rollout_from_config
    from verl_split.placement.job_config import trainer_job

    return shared_rollout_from_config(trainer_job(trainer))


def wrap_setup(wrapped, instance, args, kwargs):
    if not _shared_rollout(instance):
        return wrapped(*args, **kwargs)
    from verl_split.placement.job_config import trainer_job
    from verl_split.runtime.shared_rollout import coordinator

    backend = coordinator.configure_weight_transfer(instance.config, trainer_job(instance))
    result = wrapped(*args, **kwargs)
    coordinator.attach(instance, backend)
    return result


def wrap_init_workers(wrapped, instance, args, kwargs):
    if not _shared_rollout(instance):
        return wrapped(*args, **kwargs)
    from verl_split.placement.job_config import trainer_job
    from verl_split.runtime.shared_rollout import coordinator

    check_ray_trainer(instance)
    backend = coordinator.configure_weight_transfer(instance.config, trainer_job(instance))
    entry = _Initialising(instance)
    _initialising.append(entry)
    try:
        result = wrapped(*args, **kwargs)
    finally:
        _initialising.remove(entry)
        restore_weight_transfer(instance.config, backend)
    if entry.started is None:
        raise never_started(instance)
    coordinator.wire(instance, backend, entry.started)
    report_to_tracker(instance)
    return result


def wrap_get_client(wrapped, instance, args, kwargs):
    for entry in _initialising:
        if getattr(entry.trainer, "llm_server_manager", None) is instance and entry.started is None:
            from verl_split.runtime.shared_rollout import coordinator

            entry.started = coordinator.start(entry.trainer)
            # The actor's workers hold their engine already; verl's own manager, built next, syncs the actor
            # pool's replicas in-process (restored at the end of init_workers).
            hybrid_sync_in_process(entry.trainer.config)
    return wrapped(*args, **kwargs)


def wrap_validate(wrapped, instance, args, kwargs):
    # The late join's rate model is not asked during the pass, and its requests are dropped from the step's count.
    validating = getattr(getattr(instance, "checkpoint_manager", None), "validating", None)
    if validating is None:
        return wrapped(*args, **kwargs)
    with validating():
        return wrapped(*args, **kwargs)


# ----------------------------------------------------------------------------- what RayPPOTrainer's path adds


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
    from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError

    owner = defining_class(type(trainer), "fit")
    if owner is not RayPPOTrainer:
        raise SharedRolloutError(
            f"shared rollout runs on verl's RayPPOTrainer and its own fit(); {type(trainer).__name__} overrides "
            f"fit() ({owner.__module__ if owner else '?'}), so its loop schedules the rollout replicas and their "
            f"weight sync itself. Run the stock trainer (python -m verl.trainer.main_ppo), or {SWITCH_OFF_HINT}."
        )


def never_started(trainer: Any) -> SharedRolloutError:
    from verl_split.placement.shared import SWITCH_OFF_HINT
    from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError

    return SharedRolloutError(
        f"shared rollout: {type(trainer).__name__}.init_workers() never asked its LLMServerManager for a client "
        f"({cite('trainer_gets_client')} hands one to the agent loop), where verl-split starts the critic "
        "pool's rollout replicas; this verl builds its rollout another way, which verl-split has not been adapted "
        f"to. Install a tested verl, or {SWITCH_OFF_HINT}."
    )


def report_to_tracker(trainer: Any) -> None:
    """Add the step's shared-rollout metrics to the step's record in verl's tracker, while ``trainer`` lives.

    ``BothPoolsCheckpointManager`` leaves them in ``trainer._pending_sync_metrics``, which the v1 trainer merges
    into the step's metrics itself (``trainer_base.py`` ``_consume_sync_metrics``); ``RayPPOTrainer.fit`` has no
    such step, so they join the next training step's record (``timing_s/step`` marks one: not a validation
    record, which ``fit`` logs apart before training) on its way to the tracker. The source holds the trainer
    weakly and is unregistered once the trainer is collected: neither outlives the run.
    """
    from verl_split.runtime.metrics import tracking

    held = weakref.ref(trainer)

    def pending(record: dict) -> dict:
        owner = held()
        if owner is None or "timing_s/step" not in record:
            return {}
        metrics = getattr(owner, "_pending_sync_metrics", None) or {}
        owner._pending_sync_metrics = {}
        return metrics

    tracking.register_source(pending)
    weakref.finalize(trainer, tracking.unregister_source, pending)
