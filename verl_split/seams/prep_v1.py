"""Compute values beside old_log_prob + ref in verl's v1 trainer (``trainer.use_v1=true``).

Target: ``verl/trainer/ppo/v1/trainer_base.py`` ``PPOTrainer._compute_old_log_prob``,
``_compute_ref_log_prob`` and ``_compute_values``, called in that order by ``_step_once``.
How the wrappers cooperate: ``verl_split/prep_overlap.py``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, prep_overlap, trainers


def patch(module: ModuleType) -> None:
    adapter = trainers.V1Prep(module.PPOTrainer)
    actor_compute = prep_overlap.make_actor_compute_wrapper(adapter)
    _wrapping.wrap(module.PPOTrainer, "_compute_old_log_prob", actor_compute)
    _wrapping.wrap(module.PPOTrainer, "_compute_ref_log_prob", actor_compute)
    _wrapping.wrap(module.PPOTrainer, "_compute_values", prep_overlap.make_values_wrapper(adapter))


def unpatch(module: ModuleType) -> None:
    for method in prep_overlap.PREP_METHODS:
        _wrapping.unwrap(module.PPOTrainer, method)
