"""Compute values beside old_log_prob + ref in verl's ``RayPPOTrainer`` (every family).

Target: ``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer._compute_reward_colocate`` (a
reward model colocated in the step), ``_compute_old_log_prob``, ``_compute_ref_log_prob`` and
``_compute_values``, called in that order by ``fit`` (0.7, 0.8, and 0.9 with
``trainer.use_v1=false``). How the wrappers cooperate: ``verl_split/prep_overlap.py``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, prep_overlap, trainers


def patch(module: ModuleType) -> None:
    adapter = trainers.V0Prep(module.RayPPOTrainer)
    actor_compute = prep_overlap.make_actor_compute_wrapper(adapter)
    _wrapping.wrap(module.RayPPOTrainer, "_compute_old_log_prob", actor_compute)
    _wrapping.wrap(module.RayPPOTrainer, "_compute_ref_log_prob", actor_compute)
    _wrapping.wrap(module.RayPPOTrainer, "_compute_values", prep_overlap.make_values_wrapper(adapter))
    # A reward model colocated in the step: verl 0.7.1+ (0.7.0 scores it inside fit, ray_trainer.py; there the
    # preparation starts at old_log_prob's entry, as with no reward model).
    if "_compute_reward_colocate" in vars(module.RayPPOTrainer):
        _wrapping.wrap(module.RayPPOTrainer, "_compute_reward_colocate", prep_overlap.make_reward_wrapper(adapter))


def unpatch(module: ModuleType) -> None:
    for method in (*prep_overlap.PREP_METHODS, "_compute_reward_colocate"):
        _wrapping.unwrap(module.RayPPOTrainer, method)
