"""Split placement for verl 0.9's v1 trainer (``trainer.use_v1=true``, the default).

Target: ``verl/trainer/ppo/v1/trainer_base.py`` ``PPOTrainer._init_resource_pool_mgr``, which puts
every trainer role on one ``global_pool`` and builds ``self.resource_pool_manager``. The wrapper
lets it run (it also fills ``role_worker_mapping`` and verl's own reward/teacher pools), then
re-points the roles to the plan's pools and swaps in a manager that pins them to their nodes.
Subclasses (``trainer_separate_async.py``) call it through ``super()``, so they get the plan too.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping


def _wrap_init_resource_pool_mgr(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    from verl_split import pools

    pools.install_plan_on_trainer(instance)
    return result


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.PPOTrainer, "_init_resource_pool_mgr", _wrap_init_resource_pool_mgr)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.PPOTrainer, "_init_resource_pool_mgr")
