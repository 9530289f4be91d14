"""Overlap the actor and critic updates in verl's v1 trainer (``trainer.use_v1=true``).

Target: ``verl/trainer/ppo/v1/trainer_base.py`` ``PPOTrainer._update_critic`` and
``_update_actor``, called in that order by ``PPOTrainer._step_once``. How the two
wrappers cooperate is explained in ``verl_split/overlap.py``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, overlap, trainers


def patch(module: ModuleType) -> None:
    adapter = trainers.V1Adapter(module.PPOTrainer)
    _wrapping.wrap(module.PPOTrainer, "_update_critic", overlap.make_update_critic_wrapper(adapter))
    _wrapping.wrap(module.PPOTrainer, "_update_actor", overlap.make_update_actor_wrapper(adapter))


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.PPOTrainer, "_update_critic")
    _wrapping.unwrap(module.PPOTrainer, "_update_actor")
