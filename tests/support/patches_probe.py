"""Run by tests/plugin/test_patches.py in a fresh interpreter whose ``verl`` is an unpacked (and maybe patched) sdist.

``python patches_probe.py '<json>'`` with ``tree``, ``family``, ``ray_address`` and ``assets`` (the tiny model
of ``verl_split.dryrun.assets``, for a config verl's dataclasses accept) prints one JSON line: what verl's per-node
check said to resource pool specs on the two-node test cluster, and what its batch check said to split
layouts, called directly and through the TaskRunner (``init_resource_pool_mgr``) that builds the pools.
With ``"mode": "verl-split"`` (and VERL_SPLIT set) only the stock TaskRunner runs, with verl-split's pools.
"""

from __future__ import annotations

import copy
import json
import sys

ARGS = json.loads(sys.argv[1])

#: Resource pool specs against the test cluster's nodes of 4 and 2 GPUs (6 in all).
SPECS = {
    "3+3 (verl issue 2596)": {"global_pool": [3, 3]},
    "5 on one node": {"actor_rollout_ref_pool": [5]},
    "4 + 2 in two pools": {"actor_rollout_ref_pool": [4], "critic_pool": [2]},
    "4+2": {"global_pool": [4, 2]},
}


def outcome(call) -> dict:
    from verl_split.core.errors import PlacementError  # verl-split's own checks, where the probe runs with it on

    try:
        call()
        error = None
    except (AssertionError, ValueError, TypeError, PlacementError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return {"error": error}


def per_node_fit() -> dict:
    import ray

    try:
        from verl.single_controller.ray.base import ResourcePoolManager
    except ImportError:  # verl 0.7.0: verl/trainer/ppo/ray_trainer.py:70
        from verl.trainer.ppo.ray_trainer import ResourcePoolManager

    ray.init(address=ARGS["ray_address"], log_to_driver=False)
    try:
        nodes = [
            [n["NodeID"], n["NodeManagerAddress"], n["Resources"].get("GPU", 0)] for n in ray.nodes() if n["Alive"]
        ]
        results = {
            name: outcome(ResourcePoolManager(resource_pool_spec=spec, mapping={}).create_resource_pool)
            for name, spec in SPECS.items()
        }
    finally:
        ray.shutdown()
    return {"nodes": nodes, "specs": results}


def config():
    from hydra import compose, initialize_config_dir

    from verl_split.dryrun.assets import TinyAssets
    from verl_split.dryrun.recipe import dry_run_overrides

    assets = TinyAssets(**ARGS["assets"])
    overrides = dry_run_overrides(assets, n_gpus_per_node=8, family=ARGS["family"])  # one node of 8 GPUs, GAE
    with initialize_config_dir(config_dir=f"{ARGS['tree']}/verl/trainer/config", version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def with_batch(cfg, size: int):
    cfg = copy.deepcopy(cfg)
    cfg.data.train_batch_size = size
    cfg.actor_rollout_ref.actor.ppo_mini_batch_size = size
    cfg.critic.ppo_mini_batch_size = size
    for section in (cfg.actor_rollout_ref.actor, cfg.critic):
        section.ppo_micro_batch_size_per_gpu = 1
    # Forward passes too: verl-split's planner checks every micro-batch against the pools (placement/batch.py).
    for section in (cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref):
        section.log_prob_micro_batch_size_per_gpu = 1
    return cfg


def batch_check(cfg) -> dict:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    def check(size: int, **pools):
        batch_cfg = with_batch(cfg, size)
        return outcome(
            lambda: validate_config(batch_cfg, need_reference_policy(batch_cfg), need_critic(batch_cfg), **pools)
        )

    return {
        "batch 6, all 8 GPUs": check(6),
        "batch 8, all 8 GPUs": check(8),
        "batch 6, actor 6 + critic 2": check(6, actor_n_gpus=6, critic_n_gpus=2),
        "batch 8, actor 6 + critic 2": check(8, actor_n_gpus=6, critic_n_gpus=2),
        "batch 8, actor 4 + critic 3": check(8, actor_n_gpus=4, critic_n_gpus=3),
    }


class _Validated(Exception):
    """Raised after validate_config returned: the TaskRunner need not load a model."""


def task_runner_class():
    """verl's TaskRunner class as a plain class (0.9's is a Ray actor class), and its module."""
    if ARGS["family"] == "0.9":
        from verl.trainer import main_ppo_v0 as module

        return module.TaskRunner.__ray_metadata__.modified_class, module
    from verl.trainer import main_ppo as module

    return module.TaskRunner, module


def stop_after_validate(module) -> dict:
    """The TaskRunner's ``validate_config`` runs, then stops the run (no model is loaded); returns the pool
    sizes it was given, filled in at the call."""
    real, seen = module.validate_config, {}

    def validate_then_stop(**kwargs):
        seen.update(actor_n_gpus=kwargs.get("actor_n_gpus"), critic_n_gpus=kwargs.get("critic_n_gpus"))
        real(**kwargs)
        raise _Validated

    module.validate_config = validate_then_stop
    return seen


def run_to_validation(runner_class, cfg, size: int) -> dict:
    """What ``runner_class().run`` says of a batch of ``size``, up to its validate_config."""

    def call():
        try:
            runner_class().run(with_batch(cfg, size))
        except _Validated:
            return
        raise AssertionError("TaskRunner.run went past validate_config")

    return outcome(call)


def task_runner(cfg) -> dict:
    """The batch check as the TaskRunner runs it: stock pools, then a TaskRunner that splits 6 + 2."""
    from verl.trainer.ppo.ray_trainer import Role

    base, module = task_runner_class()
    stop_after_validate(module)

    class SplitTaskRunner(base):
        def init_resource_pool_mgr(self, config):
            manager = super().init_resource_pool_mgr(config)
            manager.resource_pool_spec = {"actor_pool": [6], "critic_pool": [2]}
            for role in manager.mapping:
                manager.mapping[role] = "critic_pool" if role == Role.Critic else "actor_pool"
            return manager

    return {
        "batch 6, stock TaskRunner": run_to_validation(base, cfg, 6),
        "batch 6, TaskRunner split 6 + 2": run_to_validation(SplitTaskRunner, cfg, 6),
        "batch 8, TaskRunner split 6 + 2": run_to_validation(SplitTaskRunner, cfg, 8),
    }


def verl_split_task_runner(cfg) -> dict:
    """The stock TaskRunner of verl 0.9's legacy trainer, whose init_resource_pool_mgr verl-split wraps."""
    cfg.trainer.use_v1 = False
    base, module = task_runner_class()
    pools = stop_after_validate(module)
    return {"batch 6": run_to_validation(base, cfg, 6), "batch 8": run_to_validation(base, cfg, 8), "pools": pools}


def main() -> None:
    if ARGS.get("mode") == "verl-split":
        print(json.dumps(verl_split_task_runner(config())))
        return
    result = {"per_node_fit": per_node_fit()}
    cfg = config()
    result["batch_check"] = batch_check(cfg)
    result["task_runner"] = task_runner(cfg)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
