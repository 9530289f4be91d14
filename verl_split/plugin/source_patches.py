"""Which of the source patches in ``patches/`` the running verl carries, told by feature, not by version.

A source build reports its release's version whatever was applied to it, so each patch is recognised by
what it adds: the ``verl.plugins`` loader's policy left in ``verl``'s namespace, the per-node check's
message in ``ResourcePoolManager._check_resource_available``, the pool-size arguments of
``validate_config``. ``_startup`` asks :func:`loads_entry_points` in every process of a run, so this module
imports only the standard library and ``compat`` (``packaging``); the other checks import verl's modules
and run from ``verl-split doctor``.
"""

from __future__ import annotations

import sys
from types import ModuleType

from verl_split.core import compat

#: Patch names, as in ``patches/<verl version>/NNNN-<name>.patch``.
PLUGIN_LOADER = "plugin-entry-points"
PER_NODE_FIT = "per-node-fit"
BATCH_PER_POOL = "batch-per-pool"

#: What :func:`loaded_by` returns for each way ``verl_split._bootstrap`` can be imported.
BY_VERL = "verl's plugin loader"
BY_STARTUP_HOOK = "verl-split's start-up hook (verl_split_activate.pth)"
BY_OTHER = "an import outside verl (e.g. examples/split_placement/main_ppo_split.py)"


def loads_entry_points(verl_module: ModuleType | None = None) -> bool:
    """verl's ``__init__`` imports ``verl.plugins`` entry points: verl 0.9+, or 0.7/0.8 with the loader patch."""
    if compat.has_entry_points():
        return True
    module = verl_module if verl_module is not None else sys.modules.get("verl")
    # verl 0.9's loader (patches/0.x/0001-plugin-entry-points.patch copies it) keeps its policy, read from
    # VERL_USE_EXTERNAL_PLUGINS, in verl's namespace: set whether or not the policy allowed any plugin.
    return module is not None and hasattr(module, "_plugins_policy")


def plugin_loader() -> str:
    """``"built in"`` (verl 0.9+), ``"patched"`` (0.7/0.8 with the loader patch) or ``"no"``; imports verl."""
    if compat.has_entry_points():
        return "built in"
    import verl

    return "patched" if loads_entry_points(verl) else "no"


def has_per_node_fit() -> bool | None:
    """``ResourcePoolManager`` checks each placement group against the nodes; None if its source is unreadable."""
    import inspect

    try:
        from verl.single_controller.ray.base import ResourcePoolManager
    except ImportError:  # verl 0.7.0 keeps it in verl/trainer/ppo/ray_trainer.py (base.py since 0.7.1)
        from verl.trainer.ppo.ray_trainer import ResourcePoolManager

    try:
        source = inspect.getsource(ResourcePoolManager._check_resource_available)
    except (OSError, TypeError):
        return None
    return "placement group(s) of at least" in source


def has_batch_per_pool() -> bool:
    """``validate_config`` takes the GPU counts of the actor's and the critic's pools."""
    import inspect

    from verl.utils.config import validate_config

    parameters = inspect.signature(validate_config).parameters
    return "actor_n_gpus" in parameters and "critic_n_gpus" in parameters


def report() -> dict[str, str]:
    """Each patch's state in this process's verl: ``built in``, ``patched``, ``yes``, ``no`` or ``unknown``."""
    return {
        PLUGIN_LOADER: _state(plugin_loader),
        PER_NODE_FIT: _state(has_per_node_fit),
        BATCH_PER_POOL: _state(has_batch_per_pool),
    }


def _state(check) -> str:
    try:
        found = check()
    except Exception as exc:  # doctor describes a broken verl; it does not fail on it
        return f"unknown ({type(exc).__name__}: {exc})"
    if isinstance(found, str):
        return found
    return {True: "yes", False: "no", None: "unknown (no source)"}[found]


def loaded_by() -> str | None:
    """Who imported verl-split's bootstrap in this process (None: nobody, verl-split is not loaded)."""
    bootstrap = sys.modules.get("verl_split._bootstrap")
    if bootstrap is None:
        return None
    return {"verl": BY_VERL, "startup": BY_STARTUP_HOOK}.get(getattr(bootstrap, "IMPORTED_BY", None), BY_OTHER)
