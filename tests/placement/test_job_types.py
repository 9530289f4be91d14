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


# --------------------------------------------------------------------------- the trainer's keys, as verl reads them


def test_a_quoted_parameter_sync_step_is_refused_not_read_as_another_step():
    # It was read as written, so "1" != 1 stepped the deferral aside, and verl failed on the text after Ray started.
    assert_refused(
        "trainer.v1.sync.parameter_sync_step", "1", "a whole number", "trainer.v1.sync.parameter_sync_step=1"
    )


def test_parameter_sync_step_is_read_from_the_modes_own_block_as_the_v1_trainer_reads_it():
    # verl/trainer/ppo/v1/trainer_base.py: config.trainer.v1.get(trainer_mode, {}).get("parameter_sync_step", 1)
    def step(**keys: Any) -> int:
        return job_from_config(nested(keys), family="0.9").trainer.parameter_sync_step

    assert step() == 1
    assert step(**{"trainer.v1.sync.parameter_sync_step": 2}) == 2
    mode = {"trainer.v1.trainer_mode": "separate_async"}
    assert step(**mode, **{"trainer.v1.separate_async.parameter_sync_step": 4}) == 4
    assert step(**mode, **{"trainer.v1.sync.parameter_sync_step": "2"}) == 1  # another mode's block: unread
    # RayPPOTrainer (use_v1=false) reads no v1 key.
    assert step(**{"trainer.use_v1": False, "trainer.v1.sync.parameter_sync_step": "2"}) == 1


@pytest.mark.parametrize("value", ["false", 3, ["1"], True])
def test_profiler_steps_that_are_no_list_of_steps_are_refused(value):
    # verl tests `global_steps in steps`: text and a bare number fail after Ray started; "1" never matches a step.
    key = "global_profiler.steps"
    with pytest.raises(PlacementError) as exc:
        job_from_config(nested({key: value}))
    assert str(exc.value).startswith(f"{key} is {value!r} (")
    assert "where a list of whole step numbers, or null is needed" in str(exc.value)
    assert f"{key}=null to profile no step" in str(exc.value)


@pytest.mark.parametrize(("value", "profiled"), [(None, ()), ([], ()), ([1, 3], (1, 3))])
def test_profiler_steps_read_as_the_steps_verl_profiles(value, profiled):
    assert job_from_config(nested({"global_profiler.steps": value})).trainer.profiler_steps == profiled


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("trainer.v1.trainer_mode", 1),
        ("algorithm.adv_estimator", True),
        ("actor_rollout_ref.rollout.checkpoint_engine.backend", 1),
        ("actor_rollout_ref.actor.strategy", 2),
        ("critic.model.path", 7),
    ],
)
def test_a_text_key_of_another_type_is_refused(key, value):
    with pytest.raises(PlacementError) as exc:
        job_from_config(nested({key: value}))
    assert str(exc.value).startswith(f"{key} is {value!r} ({type(value).__name__}), where text is needed.")
    assert f"{key}='<text>', quoted" in str(exc.value)


@pytest.mark.parametrize("value", [False, "legacy", 1])
def test_the_legacy_worker_switch_is_one_of_verls_three_values_where_verl_reads_it(value):
    key = "trainer.use_legacy_worker_impl"
    with pytest.raises(PlacementError, match=r"where one of auto, enable, disable is needed"):
        job_from_config(nested({key: value}), family="0.7")
    assert job_from_config(nested({key: "disable"}), family="0.7").rules == "v0"
    assert job_from_config(nested({key: value}), family="0.9").trainer.legacy_worker_impl == "auto"  # unread


@pytest.mark.parametrize("estimator", ["gae", "GAE", "grpo"])
def test_the_estimator_decides_the_critic_as_verls_need_critic_does(estimator):
    from verl.trainer.ppo.utils import need_critic

    config = compose_config("ppo_trainer", None, [f"algorithm.adv_estimator={estimator}"])
    with pytest.warns() if estimator != "gae" else contextlib.nullcontext():
        assert job_from_config(config).needs_critic is need_critic(config)


@pytest.mark.parametrize("dtype", ["bf16", "bfloat16", "fp16", "16", 16, "float32", 32, "BF16", "half", True, 16.5])
def test_a_model_dtype_is_read_as_verls_workers_read_it_or_refused(dtype):
    from verl.utils.torch_dtypes import PrecisionType

    try:
        verl_reads = PrecisionType.to_str(PrecisionType.to_dtype(dtype)) if dtype is not True else None
    except RuntimeError:  # the worker's "unexpected precision", after Ray started
        verl_reads = None
    config = nested({"critic.fsdp.model_dtype": dtype})
    if verl_reads is None:
        with pytest.raises(PlacementError, match=r"critic\.fsdp\.model_dtype is .* where one of 16, fp16, float16, 32"):
            job_from_config(config)
    else:
        assert job_from_config(config).critic.fsdp.model_dtype == verl_reads


def test_the_checkpoint_backend_reads_verls_default_where_unset():
    key = "actor_rollout_ref.rollout.checkpoint_engine.backend"
    assert job_from_config({}).rollout.checkpoint_backend == "naive"
    assert job_from_config(nested({key: "nccl"})).rollout.checkpoint_backend == "nccl"


def test_the_launch_stops_before_ray_on_a_quoted_sync_step():
    from verl_split.runtime.placement.hooks import check_config

    key = "trainer.v1.sync.parameter_sync_step"
    config = compose_config("ppo_trainer", None, [f'+{key}="1"', "trainer.n_gpus_per_node=2"])
    with pytest.raises(ActivationFailed, match=rf"{key} is '1' \(text\)"):
        check_config(config)
