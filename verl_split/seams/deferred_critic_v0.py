"""Where verl's ``RayPPOTrainer`` needs a deferred critic update joined (``verl_split/deferred_critic.py``).

Target: ``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer``: ``fit`` (the end of training, and
an error) and ``_save_checkpoint`` (the checkpoint holds the updated critic). The next step's
values, and a reward model on the critic's pool, join it in ``prep_overlap.py``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, deferred_critic


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.RayPPOTrainer, "fit", deferred_critic.wrap_fit)
    _wrapping.wrap(module.RayPPOTrainer, "_save_checkpoint", deferred_critic.wrap_save_checkpoint)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.RayPPOTrainer, "fit")
    _wrapping.unwrap(module.RayPPOTrainer, "_save_checkpoint")
