"""Split placement's seams: validated in the launching process, applied where verl builds its pools.

The wrappers and why each target: ``hooks.py``. On 0.9 the v1 trainer (``_init_resource_pool_mgr``) or
``main_ppo_v0``'s TaskRunner; on 0.7/0.8 the TaskRunner is ``main_ppo``'s ``__main__``, so the trainer's
constructor. Each seam's ``needs`` lists what it and ``pools.py`` read of verl, for the preflight.
"""

from __future__ import annotations

from verl_split.core import compat
from verl_split.plugin.seam import Seam, Wrap

HOOKS = "verl_split.runtime.placement.hooks:"
V1 = "verl.trainer.ppo.v1.trainer_base"
V1_TRAINER = "PPOTrainer."  # verl/trainer/ppo/v1/trainer_base.py
V0_TRAINER = "RayPPOTrainer."  # verl/trainer/ppo/ray_trainer.py

#: verl 0.7.1 moved ResourcePoolManager to single_controller/ray/base.py; 0.7.0 has it in trainer/ppo/ray_trainer.py.
_RPM = "verl.single_controller.ray.base|verl.trainer.ppo.ray_trainer:ResourcePoolManager"
_POOL = "verl.single_controller.ray.base:RayResourcePool"
#: pools.py: a ResourcePoolManager subclass and a node-pinned RayResourcePool (bundle shape copied).
POOL_NEEDS = (
    f"{_RPM}(resource_pool_spec, mapping)",
    f"{_RPM}.resource_pool_spec",
    f"{_RPM}.mapping",
    f"?{_RPM}.max_colocate_count",  # 0.7 hard-codes 3 (pools.py reads it with a default)
    f"{_RPM}.resource_pool_dict",
    f"{_RPM}.create_resource_pool",
    f"{_RPM}.get_resource_pool",
    f"{_POOL}(process_on_nodes, use_gpu, name_prefix, max_colocate_count, detached, accelerator_type)",
    f"{_POOL}.get_placement_groups",
    f"{_POOL}.pgs",
    f"{_POOL}._store",
    "verl.trainer.ppo.utils:Role.Critic",
    "verl.trainer.ppo.utils:Role.ActorRollout",
    "verl.trainer.ppo.utils:Role.ActorRolloutRef",
    "verl.trainer.ppo.utils:Role.RefPolicy",  # pools.separate_reference
)


def runtime_env_seam(name: str, switch: str, feature: str) -> Seam:
    """Every ``VERL_SPLIT*`` variable to every Ray worker (placement's and the CPU dry run's switch alike)."""
    return Seam(
        name,
        "verl.trainer.constants_ppo",
        switch,
        feature,
        compat.ANY,
        needs=("get_ppo_ray_runtime_env",),
        wraps=(Wrap("get_ppo_ray_runtime_env", HOOKS + "wrap_get_ppo_ray_runtime_env"),),
    )


SEAMS: tuple[Seam, ...] = (
    runtime_env_seam("runtime_env", "split", "placement"),
    Seam(
        "placement_check",
        "verl.utils.device",
        "split",
        "placement",
        compat.ANY,
        needs=("auto_set_device(config@0)",),
        wraps=(Wrap("auto_set_device", HOOKS + "wrap_auto_set_device"),),
    ),
    Seam(
        "placement_v1",
        V1,
        "split",
        "placement",
        compat.V1_TRAINER,
        needs=(
            f"{V1_TRAINER}_init_resource_pool_mgr",
            f"{V1_TRAINER}resource_pool_manager",
            f"{V1_TRAINER}config",
            *POOL_NEEDS,
        ),
        wraps=(Wrap("PPOTrainer._init_resource_pool_mgr", HOOKS + "install_plan_after"),),
    ),
    Seam(
        "placement_v0",
        "verl.trainer.main_ppo_v0",
        "split",
        "placement",
        compat.MAIN_PPO_V0,
        needs=(
            "BaseTaskRunner.init_resource_pool_mgr(config@0)",
            "BaseTaskRunner.role_worker_mapping",
            "TaskRunner",
            *POOL_NEEDS,
        ),
        wraps=(Wrap("BaseTaskRunner.init_resource_pool_mgr", HOOKS + "wrap_task_runner_pool_mgr"),),
        apply=HOOKS + "drop_ray_copy",
    ),
    # Each worker group's rendezvous port outside the ephemeral range (ports.py says why); on verl 0.7.0, which
    # takes no range, ``install`` steps aside with a log line.
    Seam(
        "rendezvous_ports",
        "verl.single_controller.ray.base",
        "split",
        "placement",
        compat.ANY,
        needs=(
            "RayWorkerGroup._get_master_addr_port(pg)",
            "RayWorkerGroup._master_port",
            "RayWorkerGroup._master_addr",
            "get_master_addr_port",
        ),
        apply="verl_split.runtime.placement.ports:install",
    ),
    Seam(
        "placement_legacy",
        "verl.trainer.ppo.ray_trainer",
        "split",
        "placement",
        compat.BEFORE_V1,
        needs=(
            f"{V0_TRAINER}__init__",
            f"{V0_TRAINER}resource_pool_manager",
            f"{V0_TRAINER}role_worker_mapping",
            f"{V0_TRAINER}config",
            *POOL_NEEDS,
        ),
        wraps=(Wrap("RayPPOTrainer.__init__", HOOKS + "install_plan_after"),),
    ),
)
