"""Shared rollout's seams: verl 0.9's v1 trainer, and ``RayPPOTrainer`` (0.8, 0.9's ``trainer.use_v1=false``) with
its ``LLMServerManager.get_client`` (``hooks.py``; what they do, the same for both: ``coordinator.py``); and each
trainer's wait for generation, watched for a server that dies or hangs (``watchdog.py``)."""

from __future__ import annotations

from verl_split.core import compat
from verl_split.plugin.seam import Seam, Wrap

_HOOKS = "verl_split.runtime.shared_rollout.hooks:"
_WATCHDOG = "verl_split.runtime.shared_rollout.watchdog:"
_V1 = "PPOTrainer."  # verl/trainer/ppo/v1/trainer_base.py
_LLM = "verl.workers.rollout.llm_server:"
_REPLICA = "verl.workers.rollout.replica:RolloutReplica"
_CEM = "verl.checkpoint_engine.base:CheckpointEngineManager"

_V0 = "RayPPOTrainer."  # verl/trainer/ppo/ray_trainer.py
#: What coordinator.py reads of verl's rollout, weight sync and pools, on either trainer.
_PARTS = (
    f"{_LLM}GlobalRequestLoadBalancer(servers)",
    f"{_LLM}GlobalRequestLoadBalancer.acquire_server(request_id@0)",
    f"{_LLM}GlobalRequestLoadBalancer.add_servers(servers)",
    f"{_LLM}LLMServerManager.rollout_replica_class",
    f"{_LLM}LLMServerManager.rollout_config",
    f"{_LLM}LLMServerManager.model_config",
    f"{_LLM}LLMServerManager.server_addresses",
    f"{_LLM}LLMServerManager.server_handles",
    f"{_LLM}LLMServerManager.global_load_balancer",
    f"{_LLM}LLMServerManager.get_replicas",
    f"{_REPLICA}(replica_rank, config, model_config, gpus_per_node)",
    f"{_REPLICA}.init_colocated",
    f"{_REPLICA}.world_size",
    f"{_REPLICA}.server_address",
    f"{_REPLICA}.server_handle",
    f"{_REPLICA}.servers",
    # Built by position (coordinator.wire): the worker group is actor_wg on 0.9, trainer on 0.8.
    f"{_CEM}(config)",
    f"{_CEM}.update_weights(global_steps)",
    f"{_CEM}.sleep_replicas",
    f"{_CEM}.wake_up_replicas",
    f"{_CEM}.abort_replicas",
    f"{_CEM}.resume_generation_replicas",
    f"{_CEM}.release_kv_cache_replicas",
    f"{_CEM}.resume_kv_cache_replicas",
    f"{_CEM}.replicas",
    "verl.single_controller.ray.base:split_resource_pool",
    "verl.utils.ray_utils:auto_await",
    "verl.utils.config:omega_conf_to_dataclass",
)

SEAMS: tuple[Seam, ...] = (
    Seam(
        "shared_rollout_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "split",
        "shared_rollout",
        compat.SHARED_ROLLOUT_V1,
        # coordinator.py, imported only when shared rollout is on.
        needs=(
            f"{_V1}_setup",
            f"{_V1}_validate",
            f"{_V1}llm_server_manager",
            f"{_V1}checkpoint_manager",
            f"{_V1}actor_rollout_wg",
            f"{_V1}resource_pool_manager",
            f"{_V1}_pending_sync_metrics",
            f"{_LLM}GlobalRequestLoadBalancer(servers, full_determinism)",
            *_PARTS,
        ),
        wraps=(
            Wrap("PPOTrainer._setup", _HOOKS + "wrap_setup"),
            Wrap("PPOTrainer._validate", _HOOKS + "wrap_validate"),
        ),
    ),
    Seam(
        "shared_rollout_v0",
        "verl.trainer.ppo.ray_trainer",
        "split",
        "shared_rollout",
        compat.SHARED_ROLLOUT_V0,
        needs=(
            f"{_V0}init_workers",
            f"{_V0}_validate",
            f"{_V0}fit",
            f"{_V0}llm_server_manager",
            f"{_V0}checkpoint_manager",
            f"{_V0}actor_rollout_wg",
            f"{_V0}resource_pool_manager",
            f"{_V0}config",
            *_PARTS,
        ),
        wraps=(
            Wrap("RayPPOTrainer.init_workers", _HOOKS + "wrap_init_workers"),
            Wrap("RayPPOTrainer._validate", _HOOKS + "wrap_validate"),
        ),
    ),
    Seam(
        "shared_rollout_v0_client",
        "verl.workers.rollout.llm_server",
        "split",
        "shared_rollout",
        compat.SHARED_ROLLOUT_V0,
        # RayPPOTrainer.init_workers asks for the client right after creating the manager and hands it to the
        # agent loop's workers (verl/trainer/ppo/ray_trainer.py, 0.8.0 and 0.9.1).
        needs=("LLMServerManager.get_client", "LLMServerManager.global_load_balancer"),
        wraps=(Wrap("LLMServerManager.get_client", _HOOKS + "wrap_get_client"),),
    ),
    # The trainer's wait for generation, watched on shared-rollout runs (watchdog.py): a rollout server that dies or
    # hangs stops the run naming its replica. Off unless shared rollout is on: the wrappers then call verl straight.
    Seam(
        "shared_rollout_watch_v0",
        "verl.experimental.agent_loop.agent_loop",
        "split",
        "shared_rollout",
        compat.SHARED_ROLLOUT_V0,
        needs=("AgentLoopManager.generate_sequences",),
        wraps=(Wrap("AgentLoopManager.generate_sequences", _WATCHDOG + "wrap_generate_sequences"),),
    ),
    Seam(
        "shared_rollout_watch_v1",
        "verl.trainer.ppo.v1.replay_buffer",
        "split",
        "shared_rollout",
        compat.SHARED_ROLLOUT_V1,
        needs=("ReplayBuffer.sample",),
        wraps=(Wrap("ReplayBuffer.sample", _WATCHDOG + "wrap_sample"),),
    ),
)
