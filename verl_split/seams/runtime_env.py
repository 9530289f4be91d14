"""Forward ``VERL_SPLIT*`` into the Ray ``runtime_env`` verl builds for its workers.

Workers on an existing Ray cluster inherit the raylet's environment, not the launching
shell's, so without this the plugin would be on in the driver and off in the workers.
Target: ``verl/trainer/constants_ppo.py`` ``get_ppo_ray_runtime_env``, which
``verl/trainer/main_ppo.py`` ``run_ppo`` merges into ``ray.init(runtime_env=...)``.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, settings


def _wrap_get_ppo_ray_runtime_env(wrapped, instance, args, kwargs):
    runtime_env = wrapped(*args, **kwargs)
    runtime_env.setdefault("env_vars", {}).update(settings.forwarded_env_vars())
    return runtime_env


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "get_ppo_ray_runtime_env", _wrap_get_ppo_ray_runtime_env)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "get_ppo_ray_runtime_env")
