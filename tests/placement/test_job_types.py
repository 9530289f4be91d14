"""A key of another type than its own in verl's config (a quoted ``"8"`` for a size, the text ``"false"`` for a
switch): refused as the job's view is read, before Ray starts, naming the key, the value and the type it needs.

Why refused rather than converted: verl itself converts nothing. Its role configs are built by hydra's
``instantiate`` (``omega_conf_to_dataclass`` with a ``_target_``, 0.7.1 to 0.9.1), which hands ``"8"`` to the
dataclass as text (the first test shows it on the installed verl): vLLM would then fail on it after Ray started,
and an ``if`` reads ``"false"`` as true. Once the view is read, nothing else reads verl's keys.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from verl_split.core.errors import ActivationFailed, PlacementError
from verl_split.placement import job_from_config, plan_from_config
from verl_split.tools.hydra_config import compose_config

pytestmark = pytest.mark.unit

ROLLOUT = "actor_rollout_ref.rollout"


def nested(pairs: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` as ``{"a": {"b": 1}}``."""
    tree: dict[str, Any] = {}
    for dotted, value in pairs.items():
        *parents, leaf = dotted.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def test_verl_hands_a_quoted_size_to_its_rollout_config_as_text():
    from verl.utils.config import omega_conf_to_dataclass

    config = compose_config(
        "ppo_trainer",
        None,
        [f'{ROLLOUT}.tensor_model_parallel_size="8"', f"{ROLLOUT}.name=vllm", "actor_rollout_ref.model.path=/m"],
    )
    assert omega_conf_to_dataclass(config.actor_rollout_ref.rollout).tensor_model_parallel_size == "8"


# Each family: (key, value, the type it needs, the override that says what the text meant, or None).
SIZES = [
    (f"{ROLLOUT}.tensor_model_parallel_size", "8", "a whole number", f"{ROLLOUT}.tensor_model_parallel_size=8"),
    (f"{ROLLOUT}.n", "4", "a whole number", f"{ROLLOUT}.n=4"),
    ("critic.fsdp.fsdp_size", "2", "a whole number", "critic.fsdp.fsdp_size=2"),
    ("data.train_batch_size", 64.0, "a whole number", None),
    (
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "16",
        "a whole number",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    ),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "two", "a whole number", None),
    (f"{ROLLOUT}.gpu_memory_utilization", "0.5", "a number", f"{ROLLOUT}.gpu_memory_utilization=0.5"),
]
FLAGS = [
    (
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "false",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
    ),
    ("critic.enable", "no", None),
    ("trainer.use_v1", "False", "trainer.use_v1=false"),
    ("actor_rollout_ref.hybrid_engine", "true", "actor_rollout_ref.hybrid_engine=true"),
    ("algorithm.use_kl_in_reward", 1, None),
]
#: The placement's own keys: the cluster's shape, and the split_placement block's switches.
PLACEMENT = [
    ("trainer.nnodes", "2", "a whole number", "trainer.nnodes=2"),
    ("trainer.n_gpus_per_node", "8", "a whole number", "trainer.n_gpus_per_node=8"),
    ("split_placement.ready_timeout_s", "30", "a number", "split_placement.ready_timeout_s=30"),
]


def assert_refused(key: str, value: Any, needed: str, fixed: str | None) -> PlacementError:
    with pytest.raises(PlacementError) as exc:
        job_from_config(nested({key: value}))
    message = str(exc.value)
    assert message.startswith(f"{key} is {value!r} ("), message
    assert f"where {needed} is needed" in message
    assert (f"Write it unquoted: {fixed}." if fixed else f"Set it to {needed}.") in message
    return exc.value


@pytest.mark.parametrize(("key", "value", "needed", "fixed"), SIZES, ids=[s[0] for s in SIZES])
def test_a_size_of_another_type_is_refused(key, value, needed, fixed):
    error = assert_refused(key, value, needed, fixed)
    if isinstance(value, str):
        assert "they fail on it after Ray has started" in str(error)


@pytest.mark.parametrize(("key", "value", "fixed"), FLAGS, ids=[f[0] for f in FLAGS])
def test_a_switch_of_another_type_is_refused(key, value, fixed):
    error = assert_refused(key, value, "true or false", fixed)
    if isinstance(value, str):
        assert "'false' too, is true to them" in str(error)


@pytest.mark.parametrize(("key", "value", "needed", "fixed"), PLACEMENT, ids=[p[0] for p in PLACEMENT])
def test_the_placements_own_key_of_another_type_is_refused(key, value, needed, fixed):
    error = assert_refused(key, value, needed, fixed)
    if key.startswith("split_placement."):
        assert "verl passes" not in str(error)  # verl never reads verl-split's own block


def test_a_groups_gpus_that_is_a_switch_is_quoted_back_as_given():
    groups = [{"roles": "actor,rollout,ref", "gpus": True}, {"roles": "critic", "gpus": "1"}]
    config = {"trainer": {"nnodes": 1, "n_gpus_per_node": 2}, "split_placement": {"groups": groups}}
    with pytest.raises(PlacementError, match=r"group 1 gpus must be .*, got True\."):
        plan_from_config(config, "")


def test_the_megatron_blocks_sizes_are_refused_too():
    config = nested(
        {
            "actor_rollout_ref.actor.strategy": "megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": "2",
        }
    )
    with pytest.raises(PlacementError, match=r"megatron\.tensor_model_parallel_size is '2' \(text\)"):
        job_from_config(config)


def test_a_value_of_its_type_reads_as_before():
    job = job_from_config(
        nested(
            {
                f"{ROLLOUT}.tensor_model_parallel_size": 8,
                f"{ROLLOUT}.gpu_memory_utilization": 1,  # a whole number is a number
                "critic.fsdp.param_offload": False,
                "split_placement.ready_timeout_s": 30,
                "split_placement.shared_rollout": "yes",  # its variable's spellings, as before
            }
        )
    )
    assert job.rollout.tp == 8 and job.rollout.gpu_memory_utilization == 1.0
    assert job.critic.fsdp.param_offload is False
    assert (job.split.ready_timeout_s, job.split.shared_rollout) == (30.0, True)


# --------------------------------------------------------------------------- where a user meets it


def test_plan_refuses_the_quoted_tensor_parallel_size_as_it_refuses_the_number():
    from verl_split.tools import cli

    def plan(value: str) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(
                [
                    "plan",
                    "--n-gpus-per-node",
                    "8",
                    "--placement",
                    "4:4",
                    f"{ROLLOUT}.tensor_model_parallel_size={value}",
                ]
            )
        return code, err.getvalue()

    assert plan("8")[0] == 2  # a 4-GPU pool cannot hold a TP-8 replica
    code, err = plan('"8"')
    assert code == 2
    assert f"{ROLLOUT}.tensor_model_parallel_size is '8' (text), where a whole number is needed" in err
    assert f"Write it unquoted: {ROLLOUT}.tensor_model_parallel_size=8." in err


def test_the_launch_stops_before_ray_on_a_quoted_switch():
    from verl_split.runtime.placement.hooks import check_config

    key = "actor_rollout_ref.actor.fsdp_config.param_offload"  # in every family's config
    config = compose_config("ppo_trainer", None, [f'{key}="false"', "trainer.n_gpus_per_node=2"])
    with pytest.raises(ActivationFailed, match=rf"{key} is 'false' \(text\)"):
        check_config(config)
