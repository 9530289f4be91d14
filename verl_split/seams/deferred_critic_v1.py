"""Where verl's v1 trainer needs a deferred critic update joined (``verl_split/deferred_critic.py``).

Target: ``verl/trainer/ppo/v1/trainer_base.py`` ``PPOTrainer``: ``fit`` (the end of training,
and an error), ``_save_checkpoint`` (the checkpoint holds the updated critic) and
``_compute_reward_colocate`` (a reward model on the critic's pool runs after the critic's update).
The next step's values join it in ``prep_overlap.py``, a weight push to rollout replicas on the
critic's pool in ``shared_rollout.py``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, deferred_critic, trainers


def patch(module: ModuleType) -> None:
    adapter = trainers.V1Adapter(module.PPOTrainer)
    _wrapping.wrap(module.PPOTrainer, "fit", deferred_critic.wrap_fit)
    _wrapping.wrap(module.PPOTrainer, "_save_checkpoint", deferred_critic.wrap_save_checkpoint)
    _wrapping.wrap(module.PPOTrainer, "_compute_reward_colocate", deferred_critic.make_reward_join_wrapper(adapter))


def unpatch(module: ModuleType) -> None:
    for attr in ("fit", "_save_checkpoint", "_compute_reward_colocate"):
        _wrapping.unwrap(module.PPOTrainer, attr)
