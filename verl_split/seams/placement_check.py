"""Validate the split placement in the launching process, before Ray starts anything.

Target: ``verl/utils/device.py`` ``auto_set_device``, the first call ``verl/trainer/main_ppo.py``
``main`` makes on the composed config, before ``run_ppo`` calls ``ray.init``. Why this function:

* ``main_ppo`` runs as ``__main__`` under ``python -m``, so its own functions are out of a
  post-import hook's reach; the functions it imports are not.
* ``validate_config`` would read better, but ``main_ppo_v0.TaskRunner.run`` refers to it as a
  global and Ray pickles that method by value (the module name resolves to the ActorClass, not
  the plain class): a wrapt proxy there cannot be pickled and the TaskRunner would never start.
  Nothing pickled refers to ``auto_set_device``.

It also runs for SFT configs (``sft_trainer.py``); the check skips configs without PPO roles.
"""

from __future__ import annotations

import sys
from types import ModuleType

from verl_split import _wrapping
from verl_split._args import get_argument
from verl_split.errors import ActivationFailed, PlacementError, VerlSplitError


def check_config(config) -> None:
    """Plan a PPO config's placement; stop the launching process with the planner's message."""
    from verl_split.placement import plan_from_config, select_key

    if config is None or select_key(config, "actor_rollout_ref") is None or select_key(config, "trainer") is None:
        return

    try:
        plan_from_config(config)
    except PlacementError as exc:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            raise  # inside a Ray actor: the driver reports the actor's error
        # SystemExit on purpose: hydra's main would print an exception with a traceback.
        raise ActivationFailed(f"split placement: {exc}") from exc
    # A feature the config switches on, which activation could not see: the preflight of its seams.
    from verl_split import activation
    from verl_split.placement import shared_rollout_from_config

    if shared_rollout_from_config(config):
        try:
            activation.require("shared_rollout")
        except VerlSplitError as exc:
            raise ActivationFailed(str(exc)) from exc


def _wrap_auto_set_device(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    check_config(get_argument(args, kwargs, 0, "config", None))
    return result


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "auto_set_device", _wrap_auto_set_device)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "auto_set_device")
