"""Shared rollout's seam: verl 0.9's v1 trainer (``hooks.py``; what it does: ``coordinator.py``)."""

from __future__ import annotations

from verl_split.core import compat
from verl_split.plugin.seam import Seam, Wrap

_HOOKS = "verl_split.runtime.shared_rollout.hooks:"
_V1 = "PPOTrainer."  # verl/trainer/ppo/v1/trainer_base.py
_LLM = "verl.workers.rollout.llm_server:"
_REPLICA = "verl.workers.rollout.replica:RolloutReplica"
_CEM = "verl.checkpoint_engine.base:CheckpointEngineManager"

SEAMS: tuple[Seam, ...] = (
    Seam(
        "shared_rollout_v1",
        "verl.trainer.ppo.v1.trainer_base",
        "split",
        "shared_rollout",
        compat.SHARED_ROLLOUT,
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
            f"{_CEM}(config, actor_wg, replicas)",
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
        ),
        wraps=(
            Wrap("PPOTrainer._setup", _HOOKS + "wrap_setup"),
            Wrap("PPOTrainer._validate", _HOOKS + "wrap_validate"),
        ),
    ),
)
