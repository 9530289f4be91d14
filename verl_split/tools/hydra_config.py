"""Compose a verl trainer config the way ``main_ppo`` does (hydra), without running anything.

Shared by ``verl-split plan``, the demo and ``advise --profile``, which each check a job's placement
before starting it.
"""

from __future__ import annotations

import os
from typing import Any

from verl_split.core.errors import VerlSplitError


class ConfigError(VerlSplitError):
    """The hydra config, or an override of it, cannot be composed."""


def compose_config(config_name: str, config_path: str | None, overrides: list[str]) -> Any:
    """Compose a verl trainer config as ``main_ppo`` would, without running anything."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if config_path is None:
        import verl

        config_path = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    config_dir = os.path.abspath(config_path)
    if not os.path.isdir(config_dir):
        raise ConfigError(f"--config-path {config_path!r} is not a directory. Point it at a folder of hydra configs.")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(config_name=config_name, overrides=list(overrides))
    except Exception as exc:  # hydra's own errors: a bad override, a missing config
        message = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"could not compose {config_name!r} from {config_dir} with overrides {list(overrides)}: {message}. "
            + _compose_hint(message, config_name, overrides)
        ) from exc
    finally:
        GlobalHydra.instance().clear()


def _compose_hint(message: str, config_name: str, overrides: list[str]) -> str:
    """What most likely fixes a failed compose: the Megatron config, a `+` for a new key, or quoting."""
    if "Could not override" in message:
        keys = [o.split("=")[0] for o in overrides]
        if config_name == "ppo_trainer" and "model_engine" not in keys and any(".megatron." in k for k in keys):
            # ppo_trainer's roles are FSDP (`model_engine: dp`): their configs have no `megatron` section.
            return (
                "Megatron keys need verl's Megatron config: add model_engine=megatron (verl 0.9) or pass "
                "--config-name ppo_megatron_trainer, as verl's Megatron recipes do."
            )
        return "A key the config does not have is added with a leading '+' (hydra); check its spelling."
    return (
        "Quote values with ',' or ';' for hydra, e.g. "
        "'+split_placement.placement=\"actor,rollout,ref:0-5;critic:6-7\"'."
    )
