"""Where split placement enters verl: the wrappers its seams (``seams.py``) put on verl's functions.

* ``wrap_get_ppo_ray_runtime_env`` -- ``verl/trainer/constants_ppo.py`` ``get_ppo_ray_runtime_env``, which
  ``main_ppo.run_ppo`` merges into ``ray.init(runtime_env=...)``: workers on an existing Ray cluster inherit
  the raylet's environment, not the launching shell's, so every ``VERL_SPLIT*`` variable is forwarded.
* ``wrap_auto_set_device`` -- ``verl/utils/device.py`` ``auto_set_device``, the first call ``main_ppo.main``
  makes on the composed config, before ``ray.init``: the placement is planned and checked there. Not
  ``validate_config``: ``main_ppo_v0.TaskRunner.run`` names it as a global and Ray pickles that method by
  value, and a wrapt proxy cannot be pickled. ``main_ppo`` itself runs as ``__main__``, out of a
  post-import hook's reach. SFT configs (no PPO roles) are left alone.
* ``install_plan_after`` -- the v1 ``PPOTrainer._init_resource_pool_mgr`` (every role on ``global_pool``;
  subclasses reach it through ``super()``) and, on 0.7/0.8, ``RayPPOTrainer.__init__`` (the TaskRunner there
  lives in ``main_ppo``, shipped to its actor by value; the trainer is imported by reference): after verl's
  own code ran, the roles are re-pointed to the plan's pools and the manager is swapped for one that pins
  them to their nodes, before any pool exists.
* ``wrap_task_runner_pool_mgr`` and ``drop_ray_copy`` -- verl 0.9's ``main_ppo_v0`` (``trainer.use_v1=false``):
  ``TaskRunner`` is an ``@ray.remote`` class whose Ray-built subclass (``__ray_metadata__.modified_class``)
  copied every method at decoration time (Ray 2.60 ``_inject_tracing_into_class``) and is pickled by value
  into the actor. So ``BaseTaskRunner.init_resource_pool_mgr`` is wrapped and the subclass's copy removed:
  the lookup then reaches the base class, which the actor imports by reference and patches itself.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType
from typing import Any

from verl_split.core import settings
from verl_split.core.errors import ActivationFailed, PlacementError, VerlSplitError
from verl_split.plugin.args import get_argument
from verl_split.plugin.seam import Undo


def wrap_get_ppo_ray_runtime_env(wrapped, instance, args, kwargs):
    runtime_env = wrapped(*args, **kwargs)
    runtime_env.setdefault("env_vars", {}).update(settings.forwarded_env_vars())
    return runtime_env


def check_config(config: Any) -> None:
    """Plan a PPO config's placement; stop the launching process with the planner's message."""
    from verl_split.placement import job_from_config, plan_from_config
    from verl_split.placement.job_config import is_trainer_config

    if config is None or not is_trainer_config(config):
        return

    from verl_split.placement.deferral_capacity import check_deferral_capacity

    try:
        job = job_from_config(config)  # the config read once, for the plan and the deferral's check
        # What the deferred critic update keeps resident: a v1 run that would overflow TransferQueue stops here.
        warning = check_deferral_capacity(job, plan_from_config(job), settings.current().defer_critic)
    except PlacementError as exc:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            raise  # inside a Ray actor: the driver reports the actor's error
        # SystemExit on purpose: hydra's main would print an exception with a traceback.
        raise ActivationFailed(f"split placement: {exc}") from exc
    if warning:
        logging.getLogger("verl_split").warning("verl-split: %s", warning)
    # A feature the config switches on, which activation could not see: the preflight of its seams.
    from verl_split.placement import shared_rollout_from_config
    from verl_split.plugin import activation

    if shared_rollout_from_config(job):
        try:
            activation.require("shared_rollout")
        except VerlSplitError as exc:
            raise ActivationFailed(str(exc)) from exc


def wrap_auto_set_device(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    check_config(get_argument(args, kwargs, 0, "config", None))
    return result


def install_plan_after(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    from verl_split.runtime.placement import pools

    pools.install_plan_on_trainer(instance)
    return result


def wrap_task_runner_pool_mgr(wrapped, instance, args, kwargs):
    manager = wrapped(*args, **kwargs)
    from verl_split.placement import plan_from_config
    from verl_split.runtime.placement import nodes, pools

    plan = plan_from_config(get_argument(args, kwargs, 0, "config"))
    # The TaskRunner hands its role_worker_mapping to RayPPOTrainer after this call.
    pools.separate_reference(plan, instance.role_worker_mapping, manager.mapping)
    split = pools.split_pool_manager(plan, manager)
    nodes.announce_plan(plan)
    return split


def drop_ray_copy(target: ModuleType, undo: Undo) -> None:
    """Remove the Ray-built ``TaskRunner`` subclass's copy of ``init_resource_pool_mgr`` (see above)."""
    metadata = getattr(target.TaskRunner, "__ray_metadata__", None)
    ray_class = getattr(metadata, "modified_class", None)
    if ray_class is not None and "init_resource_pool_mgr" in vars(ray_class):
        undo.delattr(ray_class, "init_resource_pool_mgr")
