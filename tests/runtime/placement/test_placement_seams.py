"""The placement seams in fresh interpreters: v1 trainer, v0 TaskRunner, the launch-time check.

Each runs verl's own pool-building method on a config composed from verl's ``ppo_trainer``
(no Ray cluster needed: pools are only described here; ``test_pools.py`` creates them).
"""

from __future__ import annotations

import pytest
from support.pyrun import run_json, run_python

from verl_split.core import compat

pytestmark = pytest.mark.subprocess

VERSION = compat.installed_version() or "0"
FAMILY = compat.family_of(VERSION)
LEGACY = not compat.has_v1_trainer()  # 0.7/0.8: RayPPOTrainer only
only_09 = pytest.mark.skipif(LEGACY, reason=f"verl {VERSION}: the v1 trainer and main_ppo_v0 are verl 0.9's")
only_legacy = pytest.mark.skipif(
    not LEGACY, reason=f"verl {VERSION}: main_ppo's own TaskRunner and RayPPOTrainer placement are 0.7/0.8's"
)
#: What is verl-split's own code, the same on every family, runs in CI on the newest family only (the oldest
#: family's leg keeps what differs by family: its trainer's seams).
OWN_CODE_ON_07 = "verl-split's own code (the planner's rules), the same on every family: in CI on 0.9"

SETUP = """
import json
# Batch sizes 6 + 2 GPUs per node split evenly (the planner checks the job's batch per pool).
FITS_6_2 = ["data.train_batch_size=1152", "actor_rollout_ref.actor.ppo_mini_batch_size=384"]
from verl_split.tools.plan import compose_config
def cfg(*overrides):
    return compose_config("ppo_trainer", None, ["trainer.nnodes=2", "trainer.n_gpus_per_node=8", *overrides])
def describe(manager):
    return {
        "type": type(manager).__name__,
        "spec": manager.resource_pool_spec,
        "mapping": {role.name: pool for role, pool in manager.mapping.items()},
    }
"""

V1 = (
    SETUP
    + """
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
class Trainer(PPOTrainer):  # concrete, so that __new__ works; only the pool-building method runs
    def on_sample_end(self, *args, **kwargs): ...
    def on_step_end(self, *args, **kwargs): ...
out = {}
for name, overrides in {
    "ppo": ["+split_placement.placement=per-node"],
    "rm_own_pool": ["reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=true",
                    "reward.reward_model.nnodes=1", "reward.reward_model.n_gpus_per_node=2"],
    "grpo": ["algorithm.adv_estimator=grpo"],
}.items():
    trainer = Trainer.__new__(Trainer)
    trainer.config = cfg(*overrides)
    trainer._init_resource_pool_mgr()
    out[name] = describe(trainer.resource_pool_manager)
    out[name]["same_dict"] = trainer.resource_pool_manager.mapping is trainer.mapping
print(json.dumps(out))
"""
)


@only_09
def test_v1_trainer_gets_the_plan():
    out = run_json(V1, {"VERL_SPLIT": "1", "VERL_SPLIT_PLACEMENT": "halves"})
    ppo = out["ppo"]
    assert ppo["type"] == "SplitResourcePoolManager" and ppo["same_dict"]
    assert ppo["spec"] == {"actor_rollout_ref_pool": [4, 4], "critic_pool": [4, 4]}  # config beats the env
    assert ppo["mapping"]["ActorRollout"] == "actor_rollout_ref_pool"
    assert ppo["mapping"]["Critic"] == "critic_pool"
    # verl's own reward pool stays, and the reward model stays on it.
    rm = out["rm_own_pool"]
    assert rm["spec"] == {"actor_rollout_ref_pool": [8], "critic_pool": [8], "reward_pool": [2]}
    assert rm["mapping"]["RewardModel"] == "reward_pool"
    # No critic: one pool, as stock verl.
    assert out["grpo"]["spec"] == {"global_pool": [8, 8]}
    assert "Critic" not in out["grpo"]["mapping"]


@only_09
def test_v1_without_verl_split_is_stock():
    out = run_json(V1, {})
    assert out["ppo"]["type"] == "ResourcePoolManager"
    assert out["ppo"]["spec"] == {"global_pool": [8, 8]}


V0 = (
    SETUP
    + """
import verl.trainer.main_ppo_v0 as v0
from verl_split.plugin import activation
config = cfg("+split_placement.placement=6:2", "reward.reward_model.enable=true", *FITS_6_2)
runner = v0.BaseTaskRunner()
runner.add_actor_rollout_worker(config)
runner.add_critic_worker(config)
runner.add_reward_model_resource_pool(config)
out = describe(runner.init_resource_pool_mgr(config))
ray_class = v0.TaskRunner.__ray_metadata__.modified_class
out["ray_class_copy_removed"] = "init_resource_pool_mgr" not in vars(ray_class)
activation.deactivate()
out["restored"] = "init_resource_pool_mgr" in vars(ray_class)
out["stock_after_unpatch"] = type(runner.init_resource_pool_mgr(config)).__name__
print(json.dumps(out))
"""
)


@only_09
def test_v0_task_runner_gets_the_plan_and_unpatch_restores_it():
    out = run_json(V0, {"VERL_SPLIT": "1"})
    assert out["type"] == "SplitResourcePoolManager"
    assert out["spec"] == {"actor_rollout_ref_pool": [6, 6], "critic_pool": [2, 2]}
    assert out["mapping"] == {
        "ActorRollout": "actor_rollout_ref_pool",
        "Critic": "critic_pool",
        "RewardModel": "critic_pool",
    }
    assert out["ray_class_copy_removed"] and out["restored"]
    assert out["stock_after_unpatch"] == "ResourcePoolManager"


LEGACY_TRAINER = (
    SETUP
    + """
import verl.trainer.main_ppo as main_ppo
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl_split.plugin import activation
class Trainer(RayPPOTrainer):
    def _create_dataloader(self, *args, **kwargs): ...  # no data here: only the pool wiring runs
def build(config):
    runner = main_ppo.TaskRunner()  # verl 0.7/0.8: the plain class main_ppo wraps in ray.remote
    runner.add_actor_rollout_worker(config)
    runner.add_critic_worker(config)
    runner.add_reward_model_resource_pool(config)
    trainer = Trainer(config=config, tokenizer=None, role_worker_mapping=runner.role_worker_mapping,
                      resource_pool_manager=runner.init_resource_pool_mgr(config))
    out = describe(trainer.resource_pool_manager)
    out["same_dict"] = trainer.resource_pool_manager.mapping is runner.mapping
    return out
out = {"split": build(cfg("+split_placement.placement=6:2", "reward.reward_model.enable=true", *FITS_6_2))}
activation.deactivate()
out["after_unpatch"] = build(cfg())["type"]
print(json.dumps(out))
"""
)


@only_legacy
def test_legacy_trainer_gets_the_plan_and_unpatch_restores_it():
    out = run_json(LEGACY_TRAINER, {"VERL_SPLIT": "1"})
    split = out["split"]
    assert split["type"] == "SplitResourcePoolManager" and split["same_dict"]
    assert split["spec"] == {"actor_rollout_ref_pool": [6, 6], "critic_pool": [2, 2]}
    assert split["mapping"] == {
        "ActorRollout": "actor_rollout_ref_pool",
        "Critic": "critic_pool",
        "RewardModel": "critic_pool",
    }
    assert out["after_unpatch"] == "ResourcePoolManager"


@only_legacy
def test_legacy_trainer_without_verl_split_is_stock():
    out = run_json(LEGACY_TRAINER.replace("activation.deactivate()", ""), {})
    assert out["split"]["type"] == "ResourcePoolManager"
    assert out["split"]["spec"] == {"global_pool": [8, 8]}


#: Per family, (module, owner attribute or "", attribute) of each placement seam's target.
PLACEMENT_TARGETS = {
    "0.9": [
        ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer", "_init_resource_pool_mgr"),
        ("verl.trainer.main_ppo_v0", "BaseTaskRunner", "init_resource_pool_mgr"),
        ("verl.utils.device", "", "auto_set_device"),
    ],
    "legacy": [
        ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", "__init__"),
        ("verl.utils.device", "", "auto_set_device"),
    ],
}


@pytest.mark.extended(
    reason="every seam, these among them, patched after import, twice, and with the entry point run again: "
    "tests/plugin/test_activation.py::test_patch_after_import_double_activation_and_unpatch"
)
def test_patch_before_and_after_import_and_twice():
    targets = PLACEMENT_TARGETS["legacy" if LEGACY else FAMILY]
    code = f"""
    import importlib, json
    targets = {targets!r}
    owners = [getattr(importlib.import_module(m), o) if o else importlib.import_module(m) for m, o, _ in targets]
    from verl_split import seam_catalogue
    seam_catalogue.activate(split=True)
    seam_catalogue.activate(split=True)
    from verl_split.plugin.wrapping import layers
    print(json.dumps([layers(vars(owner)[attr]) for owner, (_, _, attr) in zip(owners, targets)]))
    """
    expected = [1] * len(targets)
    assert run_json(code, {}) == expected  # imported first, then patched (twice)
    assert run_json(code, {"VERL_SPLIT": "1"}) == expected  # patched on import, then activated again


def test_bad_placement_stops_the_launch_before_ray_starts():
    code = """
    from verl_split.tools.plan import compose_config
    from verl.utils.device import auto_set_device
    import ray
    config = compose_config("ppo_trainer", None, ['+split_placement.placement="actor:0-3;rollout:4-7"'])
    try:
        auto_set_device(config)
    finally:
        print("ray started:", ray.is_initialized())
    """
    proc = run_python(code, {"VERL_SPLIT": "1"})
    assert proc.returncode == 1
    assert "verl-split: split placement: split_placement.placement: 'rollout' is in group" in proc.stderr
    assert "ray started: False" in proc.stdout
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- refused on a real run's launch path

#: The recipe's batch, whose mini-batch of 256 six GPUs cannot split.
RECIPE_BATCH = [
    "trainer.n_gpus_per_node=8",
    "data.train_batch_size=1024",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
]


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        pytest.param(
            [*RECIPE_BATCH, "+split_placement.placement=6:2"],
            "split_placement.placement='6:2': the pools cannot run this job's batch",
            id="batch",
        ),
        pytest.param(
            [
                "trainer.nnodes=2",
                "trainer.n_gpus_per_node=8",
                '+split_placement.placement="actor:0-5,8-9;critic:6-7,10-15"',
            ],
            "split_placement.placement='actor:0-5,8-9;critic:6-7,10-15': "
            "actor_rollout_ref_pool would have 6 GPUs on node 0",
            id="uneven-per-node",
            marks=[pytest.mark.extended(reason=OWN_CODE_ON_07)] if FAMILY == "0.7" else [],
        ),
        pytest.param(
            [
                "trainer.n_gpus_per_node=8",
                "actor_rollout_ref.actor.use_kl_loss=true",
                "+split_placement.placement='actor,rollout:0-3;critic,ref:4-7'",
            ],
            "split_placement.placement: 'ref' is in group 'critic,ref:4-7', apart from the actor's "
            "'actor,rollout:0-3', but verl's v1 trainer",
            id="reference-apart-on-v1",
            marks=[
                only_09,
                pytest.mark.extended(
                    reason="tests/placement/test_reference_placement.py refuses the layout on verl's own composed "
                    "config (v1, its default); the batch case shows the launch stopping before Ray"
                ),
            ],
        ),
    ],
)
def test_main_ppo_stops_before_ray_starts(tmp_path, overrides, said):
    """`python -m verl.trainer.main_ppo` itself: the launching process stops before ray.init, so no placement
    group can exist; without verl-split the same command goes on past this point (it is stock)."""
    import subprocess
    import sys

    from support.pyrun import clean_env

    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run(command, env=clean_env({"VERL_SPLIT": "1"}), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"verl-split: split placement: {said}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Started a local Ray instance" not in proc.stdout + proc.stderr


@only_09
def test_the_trainers_planner_refuses_before_any_pool_exists():
    """The TaskRunner's seam (v1 `_init_resource_pool_mgr`) raises before the pool manager exists: the
    same refusal reaches a run whose launching process was not checked (a TaskRunner started elsewhere)."""
    code = (
        V1.split("out = {}")[0]
        + """
import ray
from verl_split.core.errors import PlacementError
trainer = Trainer.__new__(Trainer)
trainer.config = compose_config("ppo_trainer", None, %r)
try:
    trainer._init_resource_pool_mgr()
    print(json.dumps({"raised": None}))
except PlacementError as exc:
    print(json.dumps({"raised": str(exc), "ray": ray.is_initialized(),
                      "manager": type(getattr(trainer, "resource_pool_manager", None)).__name__}))
"""
        % [*RECIPE_BATCH, "+split_placement.placement=6:2"]
    )
    out = run_json(code, {"VERL_SPLIT": "1"})
    assert out["raised"] and "the pools cannot run this job's batch" in out["raised"]
    assert out["ray"] is False and out["manager"] != "SplitResourcePoolManager"


@only_09
def test_shared_rollout_that_cannot_fit_stops_main_ppo_before_ray_starts(tmp_path):
    """The memory estimate on the launch path: the GPU's size from `nvidia-smi` (a stand-in here printing
    16 GiB), the critic's size from its config.json (deepseek-llm-7b's shape)."""
    import json
    import os
    import subprocess
    import sys

    from support.pyrun import clean_env

    model = tmp_path / "model"
    model.mkdir()
    shape = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 30}
    (model / "config.json").write_text(json.dumps({**shape, "vocab_size": 102400}))
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 16384\n")
    smi.chmod(0o755)
    overrides = [
        "trainer.n_gpus_per_node=8",
        f"critic.model.path={model}",
        "+split_placement.shared_rollout=true",
        f"hydra.run.dir={tmp_path}",
    ]
    env = clean_env({"VERL_SPLIT": "1", "PATH": f"{smi.parent}{os.pathsep}{os.environ['PATH']}"})
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "verl-split: split placement: default placement='halves': shared rollout does not fit" in proc.stderr
    assert "vLLM 0.5 x 16 GiB = 8.0 GiB + critic 6.49B params / 4 shards" in proc.stderr
    assert "Traceback" not in proc.stderr and "Started a local Ray instance" not in proc.stdout + proc.stderr
