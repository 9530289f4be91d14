"""Split placement for verl 0.7 and 0.8 (``main_ppo``'s ``TaskRunner`` builds a ``RayPPOTrainer``).

Target: ``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer.__init__``. On these releases
``TaskRunner`` (with ``init_resource_pool_mgr``, every role on ``global_pool``) lives in
``verl/trainer/main_ppo.py`` itself, which ``python -m`` runs as ``__main__``: a post-import hook
never sees that module, and Ray ships the class *by value* into the TaskRunner actor. The
trainer it builds is imported there by reference, so the seam is the trainer's constructor:
after it ran, the roles are re-pointed to the plan's pools (in the mapping the TaskRunner
shares) and the manager is swapped before ``init_workers`` creates any pool. Subclasses
(recipes) reach it through ``super().__init__``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping


def _wrap_init(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    from verl_split import pools

    pools.install_plan_on_trainer(instance)
    return result


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.RayPPOTrainer, "__init__", _wrap_init)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.RayPPOTrainer, "__init__")
