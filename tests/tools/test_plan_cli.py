"""``verl-split plan``: the picture, ``--json``, verl's composed config, and bad input (exit 2, no traceback).

The command runs in this process (``cli.main``, in the environment the test gives it), each run as its own
``verl-split plan`` would: a fresh process per call cost 4-10 s of imports each. One test runs the console
command as a process, to show its exit code and its stderr there.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
from support.pyrun import clean_env

from verl_split.core import compat, settings

pytestmark = pytest.mark.subprocess


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def plan(*args: str, env: dict[str, str] | None = None) -> Ran:
    """``verl-split plan ARGS`` with the test process's environment cleaned as a fresh process would get it."""
    from verl_split.tools import cli

    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(clean_env(env))
    settings.thaw()  # the command reads this environment, as a new process would
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(["plan", *args])
            except SystemExit as exc:  # argparse and the command's own exits
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
        settings.thaw()
    return Ran(code, out.getvalue(), err.getvalue())


def test_the_console_command_exits_2_with_one_line_and_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "verl_split.tools.cli", "plan", "--placement", "halfs"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 2 and "halfs" in proc.stderr and "Traceback" not in proc.stderr


def test_picture_spec_and_mapping():
    proc = plan("--nnodes", "2", "--n-gpus-per-node", "8", "--placement", "6:2")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "node 0 |" in out and "node 1 |" in out
    assert "resource_pool_spec: {'actor_rollout_ref_pool': [6, 6], 'critic_pool': [2, 2]}" in out
    assert "critic  -> critic_pool" in out
    assert max(len(line) for line in out.split("\n\n")[1].splitlines()) <= 100


def test_json():
    proc = plan("--nnodes", "2", "--n-gpus-per-node", "8", "--placement", "per-node", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "resource_pool_spec": {"actor_rollout_ref_pool": [4, 4], "critic_pool": [4, 4]},
        "mapping": {
            "actor": "actor_rollout_ref_pool",
            "rollout": "actor_rollout_ref_pool",
            "ref": "actor_rollout_ref_pool",
            "critic": "critic_pool",
        },
        "shared_rollout": False,
    }


def test_environment_variable_is_the_default_placement():
    proc = plan("--json", env={"VERL_SPLIT_PLACEMENT": "3:5"})
    assert json.loads(proc.stdout)["resource_pool_spec"] == {"actor_rollout_ref_pool": [3], "critic_pool": [5]}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--placement", "actor:0-3;rollout:4-7"], "actor and rollout are one worker"),
        (["--placement", "actor:0-15;critic:4-7"], "outside the cluster"),
        (["--nnodes", "0"], "nnodes must be a whole number"),
        (["--placement", "6:4"], "asks for 10 GPUs per node"),
        (["--no-critic", "--placement", "6:2"], "this run has no critic"),
        (["--rollout-tp", "4", "--placement", "6:2"], "not divisible by --rollout-tp=4"),
    ],
)
def test_bad_input_exits_2_with_one_message(args, fragment):
    proc = plan(*args)
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_bad_environment_value_exits_2():
    proc = plan(env={"VERL_SPLIT_PLACEMENT": "halfs"})
    assert proc.returncode == 2 and "Did you mean 'halves'" in proc.stderr and "Traceback" not in proc.stderr


def test_verl_config_with_hydra_overrides():
    proc = plan(
        "--json",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=8",
        '+split_placement.placement="actor,rollout,ref:0-3,8-11;critic:4-7,12-15"',
        env={"VERL_SPLIT_PLACEMENT": "all"},  # the config wins over the environment
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["resource_pool_spec"] == {"actor_rollout_ref_pool": [4, 4], "critic_pool": [4, 4]}


def test_a_pool_with_different_counts_per_node_is_refused_with_the_reason():
    proc = plan(
        "trainer.nnodes=2", "trainer.n_gpus_per_node=8", '+split_placement.placement="actor:0-5,8-9;critic:6-7,10-15"'
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "actor_rollout_ref_pool would have 6 GPUs on node 0 and 2 on node 1" in proc.stderr
    assert "(RayWorkerGroup._init_with_resource_pool in verl/single_controller/ray/base.py)" in proc.stderr
    # The nearest ratio that plans with this job's batch (verl's defaults: 1024 prompts, mini-batch 256).
    assert proc.stderr.rstrip().endswith("Give the pool the same number of GPUs on every node it uses, e.g. 4:4.")


def test_the_batch_is_checked_with_another_familys_rules():
    base = [
        "trainer.n_gpus_per_node=8",
        "+split_placement.placement=6:2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    ]
    fits_v1 = ["actor_rollout_ref.actor.ppo_mini_batch_size=240"]  # v1 pads the 1024 rows; 0.8 does not
    assert plan("--verl", "0.9", *base, *fits_v1).returncode == 0
    proc = plan("--verl", "0.8", *base, *fits_v1)
    assert proc.returncode == 2 and "(verl 0.8, RayPPOTrainer, engine workers)" in proc.stderr
    assert "1024 rows do not split over its 6 data-parallel ranks" in proc.stderr
    assert "RayPPOTrainer._balance_batch in verl/trainer/ppo/ray_trainer.py (equal_size=True)" in proc.stderr


def test_verl_config_grpo_checks_rollout_tp_and_critic():
    proc = plan("--config-name", "ppo_trainer", "algorithm.adv_estimator=grpo", "+split_placement.placement=6:2")
    assert proc.returncode == 2 and "no critic (algorithm.adv_estimator=grpo)" in proc.stderr
    proc = plan("trainer.n_gpus_per_node=8", "+split_placement.placement=5:3")  # rollout tp is 2 by default
    assert proc.returncode == 2 and "actor_rollout_ref.rollout.tensor_model_parallel_size" in proc.stderr
    assert "Traceback" not in proc.stderr


_SHARED_ROLLOUT_HERE = pytest.mark.skipif(
    not compat.verl_in(compat.SHARED_ROLLOUT),
    reason="shared rollout needs verl 0.9; test_shared_rollout_plan.py checks the message on older ones",
)


@_SHARED_ROLLOUT_HERE
def test_shared_rollout_shows_which_gpus_generate():
    proc = plan("--nnodes", "1", "--n-gpus-per-node", "8", "--shared-rollout", "--rollout-tp", "2")
    assert proc.returncode == 0, proc.stderr
    assert "|4 b:CR   |" in proc.stdout
    assert "rollout: GPUs 0-3 (actor pool, hybrid) and 4-7 (critic pool, shared rollout)" in proc.stdout
    proc = plan("--shared-rollout", "--placement", "all")
    assert proc.returncode == 2 and "no second pool to generate on" in proc.stderr and "Traceback" not in proc.stderr


@_SHARED_ROLLOUT_HERE
def test_shared_rollout_from_the_environment_and_the_config():
    proc = plan("--json", env={"VERL_SPLIT_SHARED_ROLLOUT": "1"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["shared_rollout"] is True
    # The config's key wins over the environment, and the config's own checks run.
    proc = plan("--json", "+split_placement.shared_rollout=false", env={"VERL_SPLIT_SHARED_ROLLOUT": "1"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["shared_rollout"] is False
    proc = plan("+split_placement.shared_rollout=true", "actor_rollout_ref.model.lora_rank=8")
    assert proc.returncode == 2 and "actor_rollout_ref.model.lora.merge=true" in proc.stderr


def test_unquoted_commas_get_a_hint():
    proc = plan("+split_placement.placement=actor,critic")
    assert proc.returncode == 2 and "Quote values with ','" in proc.stderr and "Traceback" not in proc.stderr


def test_a_megatron_key_on_the_fsdp_config_names_verls_megatron_config():
    proc = plan("critic.megatron.tensor_model_parallel_size=2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--config-name ppo_megatron_trainer" in proc.stderr and "model_engine=megatron" in proc.stderr
    proc = plan("critic.no_such_key=2")
    assert proc.returncode == 2 and "with a leading '+'" in proc.stderr and "Megatron" not in proc.stderr
    proc = plan("model_engine=megatron", "critic.megatron.no_such_key=2")  # the Megatron config, a wrong key
    assert proc.returncode == 2 and "with a leading '+'" in proc.stderr and "Megatron keys need" not in proc.stderr


def test_the_console_command_exits_2_on_the_quoted_sync_step():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_split.tools.cli",
            "plan",
            "trainer.n_gpus_per_node=8",
            '+trainer.v1.sync.parameter_sync_step="2"',
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "trainer.v1.sync.parameter_sync_step is '2' (text), where a whole number is needed" in proc.stderr
    assert "Write it unquoted: trainer.v1.sync.parameter_sync_step=2." in proc.stderr
    assert "Traceback" not in proc.stderr
