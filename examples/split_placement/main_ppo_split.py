"""Run verl's PPO with split placement: ``python main_ppo_split.py [hydra overrides]``.

verl-split switches itself on here, without ``VERL_SPLIT=1`` in the shell, and then hands the
composed config to verl's own ``verl.trainer.main_ppo`` entry point: same config checks, same
``run_ppo``, same TaskRunner and trainer as ``python -m verl.trainer.main_ppo``. The config is
``config/ppo_trainer_split.yaml``: verl's ``ppo_trainer`` plus a ``split_placement`` block, so
every override a stock run accepts works here too.
"""

from __future__ import annotations

import os

# verl-split's bootstrap reads VERL_SPLIT when `import verl` loads the `verl.plugins` entry
# point, and its post-import hooks must be in place before verl.trainer.main_ppo binds
# get_ppo_ray_runtime_env and auto_set_device by name: so set it before any verl import.
# Ray workers: a local Ray cluster started by run_ppo inherits this process's environment,
# and on an existing cluster the runtime_env seam copies every VERL_SPLIT* variable into
# the runtime_env that run_ppo passes to ray.init. Overwritten, not defaulted: this script's
# name is its promise; compare with the updates one after the other via VERL_SPLIT_OVERLAP=0,
# or with stock verl via `python -m verl.trainer.main_ppo`.
os.environ["VERL_SPLIT"] = "1"

import hydra  # noqa: E402

from verl_split._bootstrap import activate_from_environment  # noqa: E402

# Importing the bootstrap already activated the plugin; calling again (a no-op then) also covers
# a process that imported verl, and so the bootstrap, before VERL_SPLIT was set.
activate_from_environment()

from verl.trainer import main_ppo  # noqa: E402


@hydra.main(config_path="config", config_name="ppo_trainer_split", version_base=None)
def main(config) -> None:
    # Hydra's decorated main runs its task function directly when handed a config, so this is
    # verl's own main body (auto_set_device, validate_config, run_ppo) on our composed config.
    main_ppo.main(config)


if __name__ == "__main__":
    main()
