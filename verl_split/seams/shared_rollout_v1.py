"""Rollout on both pools for verl 0.9's v1 trainer (``trainer.use_v1=true``, ``trainer_mode=sync``).

Target: ``verl/trainer/ppo/v1/trainer_base.py`` ``PPOTrainer``:

* ``_setup``: before it, the actor's checkpoint engine is chosen (the actor worker class takes
  the config inside ``_setup``); after it (verl's replicas, load balancer and checkpoint manager
  exist, and ``init`` has not yet called ``on_init_end``, which pushes the first weights), the
  critic pool's replicas start and join them. What happens: ``verl_split/shared_rollout.py``.
* ``_validate``: requests of a validation pass do not count in the next step's
  ``split/critic_pool_rollout_share``.

Only when shared rollout is on; the run was validated before Ray started (the planner, and the
preflight of the verl symbols shared rollout uses: ``verl_split/preflight.py``). ``verl_split.shared_rollout``
imports verl modules that not every release has (its balancer's module moved in 0.9.1), so it is imported
only once the config asks for shared rollout: a run with it off never imports them.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping


def _wrap_setup(wrapped, instance, args, kwargs):
    from verl_split.placement import shared_rollout_from_config

    if not shared_rollout_from_config(instance.config):
        return wrapped(*args, **kwargs)
    from verl_split import shared_rollout

    backend = shared_rollout.configure_weight_transfer(instance.config)
    result = wrapped(*args, **kwargs)
    shared_rollout.attach(instance, backend)
    return result


def _wrap_validate(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    take_routed = getattr(getattr(instance, "checkpoint_manager", None), "take_routed", None)
    if take_routed is not None:
        take_routed()  # drop the validation's requests
    return result


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.PPOTrainer, "_setup", _wrap_setup)
    _wrapping.wrap(module.PPOTrainer, "_validate", _wrap_validate)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.PPOTrainer, "_setup")
    _wrapping.unwrap(module.PPOTrainer, "_validate")
