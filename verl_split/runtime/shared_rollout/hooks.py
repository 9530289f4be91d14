"""Shared rollout's wrappers of verl's trainers; what they start is ``coordinator.py``'s, the same for both.

verl 0.9's v1 trainer (``trainer.use_v1=true``, ``trainer_mode=sync``), ``trainer/ppo/v1/trainer_base.py``:

* ``wrap_setup`` -- ``PPOTrainer._setup``: before it, the actor's checkpoint engine is chosen (the actor
  worker class takes the config inside ``_setup``); after it (verl's replicas, load balancer and checkpoint
  manager exist, and ``init`` has not yet called ``on_init_end``, which pushes the first weights), the
  critic pool's replicas start and join them (``coordinator.attach``).

``RayPPOTrainer`` (0.8, 0.9 with ``trainer.use_v1=false``, verl's neo branch), ``trainer/ppo/ray_trainer.py``
(what its path adds to the coordinator: ``ray_trainer.py`` beside this module):

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
only once the config asks for shared rollout: a run with it off never imports them.
"""

from __future__ import annotations

from typing import Any

#: RayPPOTrainers inside init_workers with shared rollout on, and what wrap_get_client started for each.
_initialising: list[Any] = []
_started: dict[int, Any] = {}


def wrap_setup(wrapped, instance, args, kwargs):
    from verl_split.placement import shared_rollout_from_config

    if not shared_rollout_from_config(instance.config):
        return wrapped(*args, **kwargs)
    from verl_split.runtime.shared_rollout import coordinator

    backend = coordinator.configure_weight_transfer(instance.config)
    result = wrapped(*args, **kwargs)
    coordinator.attach(instance, backend)
    return result


def wrap_init_workers(wrapped, instance, args, kwargs):
    from verl_split.placement import shared_rollout_from_config

    if not shared_rollout_from_config(instance.config):
        return wrapped(*args, **kwargs)
    from verl_split.runtime.shared_rollout import coordinator, ray_trainer

    ray_trainer.check_ray_trainer(instance)
    backend = coordinator.configure_weight_transfer(instance.config)
    _initialising.append(instance)
    try:
        result = wrapped(*args, **kwargs)
    finally:
        _initialising.remove(instance)
        ray_trainer.restore_weight_transfer(instance.config, backend)
    started = _started.pop(id(instance), None)
    if started is None:
        raise ray_trainer.never_started(instance)
    coordinator.wire(instance, backend, started)
    ray_trainer.report_to_tracker(instance)
    return result


def wrap_get_client(wrapped, instance, args, kwargs):
    for trainer in _initialising:
        if getattr(trainer, "llm_server_manager", None) is instance and id(trainer) not in _started:
            from verl_split.runtime.shared_rollout import coordinator, ray_trainer

            _started[id(trainer)] = coordinator.start(trainer)
            # The actor's workers hold their engine already; verl's own manager, built next, syncs the actor
            # pool's replicas in-process (restored at the end of init_workers).
            ray_trainer.hybrid_sync_in_process(trainer.config)
    return wrapped(*args, **kwargs)


def wrap_validate(wrapped, instance, args, kwargs):
    # The late join's rate model is not asked during the pass, and its requests are dropped from the step's count.
    validating = getattr(getattr(instance, "checkpoint_manager", None), "validating", None)
    if validating is None:
        return wrapped(*args, **kwargs)
    with validating():
        return wrapped(*args, **kwargs)
