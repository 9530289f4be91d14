"""The placement seams in fresh interpreters: v1 trainer, v0 TaskRunner, the launch-time check.

Each runs verl's own pool-building method on a config composed from verl's ``ppo_trainer``
(no Ray cluster needed: pools are only described here; ``test_pools_multinode`` creates them).
"""

from __future__ import annotations

import pytest
from pyrun import run_json, run_python

from verl_split import compat

VERSION = compat.installed_version() or "0"
FAMILY = compat.family_of(VERSION)
LEGACY = not compat.has_v1_trainer()  # 0.7/0.8: RayPPOTrainer only
only_09 = pytest.mark.skipif(LEGACY, reason=f"verl {VERSION}: the v1 trainer and main_ppo_v0 are verl 0.9's")
only_legacy = pytest.mark.skipif(
    not LEGACY, reason=f"verl {VERSION}: main_ppo's own TaskRunner and RayPPOTrainer placement are 0.7/0.8's"
)

SETUP = """
import json
from verl_split.plan_cli import compose_config
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
from verl_split import activation
config = cfg("+split_placement.placement=6:2", "reward.reward_model.enable=true")
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
from verl_split import activation
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
out = {"split": build(cfg("+split_placement.placement=6:2", "reward.reward_model.enable=true"))}
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


def test_patch_before_and_after_import_and_twice():
    targets = PLACEMENT_TARGETS["legacy" if LEGACY else FAMILY]
    code = f"""
    import importlib, json
    targets = {targets!r}
    owners = [getattr(importlib.import_module(m), o) if o else importlib.import_module(m) for m, o, _ in targets]
    from verl_split import activation
    activation.activate(split=True)
    activation.activate(split=True)
    def layers(obj):
        n = 0
        while getattr(obj, "_self_verl_split", False):
            n, obj = n + 1, obj.__wrapped__
        return n
    print(json.dumps([layers(vars(owner)[attr]) for owner, (_, _, attr) in zip(owners, targets)]))
    """
    expected = [1] * len(targets)
    assert run_json(code, {}) == expected  # imported first, then patched (twice)
    assert run_json(code, {"VERL_SPLIT": "1"}) == expected  # patched on import, then activated again


def test_bad_placement_stops_the_launch_before_ray_starts():
    code = """
    from verl_split.plan_cli import compose_config
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
