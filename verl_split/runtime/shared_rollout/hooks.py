"""Shared rollout's wrappers of verl 0.9's v1 trainer (``trainer.use_v1=true``, ``trainer_mode=sync``).

* ``wrap_setup`` -- ``PPOTrainer._setup``: before it, the actor's checkpoint engine is chosen (the actor
  worker class takes the config inside ``_setup``); after it (verl's replicas, load balancer and checkpoint
  manager exist, and ``init`` has not yet called ``on_init_end``, which pushes the first weights), the
  critic pool's replicas start and join them (``coordinator.py``).
* ``wrap_validate`` -- ``PPOTrainer._validate``: the requests of a validation pass do not count in the next
  step's ``split/critic_pool_rollout_share``.

Only when shared rollout is on; the run was validated before Ray started (the planner). ``coordinator.py``
imports verl modules that not every release has (its balancer's module moved in 0.9.1), so it is imported
only once the config asks for shared rollout: a run with it off never imports them.
"""

from __future__ import annotations


def wrap_setup(wrapped, instance, args, kwargs):
    from verl_split.placement import shared_rollout_from_config

    if not shared_rollout_from_config(instance.config):
        return wrapped(*args, **kwargs)
    from verl_split.runtime.shared_rollout import coordinator

    backend = coordinator.configure_weight_transfer(instance.config)
    result = wrapped(*args, **kwargs)
    coordinator.attach(instance, backend)
    return result


def wrap_validate(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    take_routed = getattr(getattr(instance, "checkpoint_manager", None), "take_routed", None)
    if take_routed is not None:
        take_routed()  # drop the validation's requests
    return result
