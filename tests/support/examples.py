"""The shipped example (``examples/split_placement/``) as the tests use it: its config composed with the installed
verl, batch sizes that split evenly, and its scripts' arguments read through a stand-in interpreter."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from support.paths import EXAMPLE

from verl_split.tools.hydra_config import compose_config

CONFIG_DIR = EXAMPLE / "config"
SPLIT_CONFIG = "ppo_trainer_split"

#: Batch sizes that 6 + 2 and 3 + 5 GPUs split evenly (the planner checks the job's batch per pool).
FITS_6_2 = ["data.train_batch_size=1152", "actor_rollout_ref.actor.ppo_mini_batch_size=384"]
FITS_3_5 = ["data.train_batch_size=1200", "actor_rollout_ref.actor.ppo_mini_batch_size=240"]


def compose_split(overrides: list[str]):
    """``ppo_trainer_split.yaml`` with ``overrides``, composed by hydra against the installed verl."""
    return compose_config(SPLIT_CONFIG, str(CONFIG_DIR), overrides)


def script_arguments(script: Path, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> list[str]:
    """The arguments ``script`` hands its Python interpreter, with every shell variable expanded."""
    record = tmp_path / "argv.json"
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n")
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IEXEC)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    run_env.update(env or {}, PYTHON=str(stand_in), HOME=str(tmp_path))
    subprocess.run(["bash", str(script), *extra], env=run_env, check=True, capture_output=True)
    return json.loads(record.read_text())
