"""Overlap the actor and critic updates in verl's legacy trainer (``trainer.use_v1=false``).

Target: ``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer._update_critic`` and
``_update_actor``, called in that order by ``RayPPOTrainer.fit``. How the two wrappers
cooperate is explained in ``verl_split/overlap.py``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, overlap, trainers


def patch(module: ModuleType) -> None:
    adapter = trainers.V0Adapter(module.RayPPOTrainer)
    _wrapping.wrap(module.RayPPOTrainer, "_update_critic", overlap.make_update_critic_wrapper(adapter))
    _wrapping.wrap(module.RayPPOTrainer, "_update_actor", overlap.make_update_actor_wrapper(adapter))


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.RayPPOTrainer, "_update_critic")
    _wrapping.unwrap(module.RayPPOTrainer, "_update_actor")
