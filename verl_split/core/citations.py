"""Every fact verl-split takes from verl or megatron-core and cites in a message or a rule: one row each.

A row names the file inside the installed package, the symbol (function, class or ``Class.method``) and an
anchor: a short string that appears verbatim in that symbol's source in every release the row applies to.
Messages cite the file and symbol (``cite``), never a line number, which moves with every release;
``tests/core/test_citations.py`` finds each anchor in the installed package and fails naming the row when a release
has changed what is cited. Standard library only, and nothing imported from verl.
"""

from __future__ import annotations

from dataclasses import dataclass

VERL = "verl"
MCORE = "megatron-core"

_IMPL = "verl/workers/engine/megatron/transformer_impl.py"
_ENGINE = "MegatronEngine"
_PS = "megatron/core/parallel_state.py"
_INIT_MP = "initialize_model_parallel"


@dataclass(frozen=True)
class Citation:
    """One cited fact: where it lives in ``library`` and the text that shows it still says so."""

    key: str
    #: The distribution: ``verl`` or ``megatron-core``.
    library: str
    #: The file, from the package's top folder: ``verl/protocol.py``, ``megatron/core/parallel_state.py``.
    path: str
    #: ``function``, ``Class`` or ``Class.method``: where the anchor is.
    symbol: str
    #: Verbatim in the symbol's source.
    anchor: str
    #: The library's releases it applies to (a PEP 440 specifier, ``>=0.9``); empty: every release.
    releases: str = ""

    def __str__(self) -> str:
        return f"{self.symbol} in {self.path}"


def _verl(key: str, path: str, symbol: str, anchor: str, releases: str = "") -> Citation:
    return Citation(key, VERL, path, symbol, anchor, releases)


def _mcore(key: str, path: str, symbol: str, anchor: str) -> Citation:
    return Citation(key, MCORE, path, symbol, anchor)


#: The rows, in the order of the modules that cite them.
ROWS: tuple[Citation, ...] = (
    # The batch rules (placement.batch_rules, batch_vpp): where each verl family asserts each.
    _verl(
        "mini_batch_split",
        "verl/workers/engine_workers.py",
        "TrainingWorker.train_mini_batch",
        "assert mini_batch_size % self.engine.get_data_parallel_size() == 0",
    ),
    _verl(
        "micro_batches",
        "verl/workers/engine/utils.py",
        "prepare_micro_batches",
        "total_data_size % (force_group_size * micro_batch_size_per_gpu) == 0",
        ">=0.7.1",  # 0.7.0 asserts nothing there: only chunk_tensordict's even split of len // micro chunks
    ),
    _verl(
        "mini_batch_iterator", "verl/utils/tensordict_utils.py", "make_iterator", "batch_size[0] % mini_batch_size == 0"
    ),
    _verl(
        "balance_batch",
        "verl/trainer/ppo/ray_trainer.py",
        "RayPPOTrainer._balance_batch",
        "k_partitions=dp_size, equal_size=True",
    ),
    _verl("chunk_tensordict", "verl/utils/tensordict_utils.py", "chunk_tensordict", "len(td) % chunks == 0"),
    _verl(
        "v1_batch_multiple",
        "verl/trainer/ppo/v1/trainer_base.py",
        "PPOTrainer._get_required_batch_multiple",
        "math.lcm(required_multiple",
        ">=0.9",
    ),
    _verl("vpp_micro_groups", _IMPL, f"{_ENGINE}.forward_backward_batch", "% num_batches_divided_by == 0"),
    _verl(
        "vpp_groups_above_1", _IMPL, f"{_ENGINE}.forward_backward_batch", "if vpp_size is not None and vpp_size > 1:"
    ),
    _verl(
        "seqlen_partitions",
        "verl/utils/seqlen_balancing.py",
        "get_seqlen_balanced_partitions",
        "assert len(seqlen_list) >= k_partitions",
    ),
    _verl(
        "seqlen_round_up",
        "verl/utils/seqlen_balancing.py",
        "rearrange_micro_batches",
        "roundup_divisible(num_micro_batches, num_batches_divided_by)",
    ),
    # 0.7's legacy workers.
    _verl("legacy_chunk", "verl/protocol.py", "DataProto.chunk", "assert len(self) % chunks == 0", "<0.8"),
    _verl(
        "legacy_actor_batch",
        "verl/workers/fsdp_workers.py",
        "ActorRolloutRefWorker.__init__",
        "assert self.config.actor.ppo_mini_batch_size > 0",
        "<0.8",
    ),
    _verl(
        "legacy_log_prob_batch",
        "verl/workers/fsdp_workers.py",
        "ActorRolloutRefWorker.__init__",
        "self.config.rollout.log_prob_micro_batch_size //=",
        "<0.8",
    ),
    _verl(
        "legacy_critic_batch",
        "verl/workers/fsdp_workers.py",
        "CriticWorker.__init__",
        "assert self.config.ppo_mini_batch_size % self.config.ppo_micro_batch_size_per_gpu == 0",
        "<0.8",
    ),
    # Pools and processes (placement.checks, placement.megatron).
    _verl(
        "pool_first_node_count",
        "verl/single_controller/ray/base.py",
        "RayWorkerGroup._init_with_resource_pool",
        "local_world_size = resource_pool.store[0]",
    ),
    _verl(
        "colocated_workers",
        "verl/single_controller/ray/base.py",
        "create_colocated_worker_cls",
        "class WorkerDict(worker_cls):",
    ),
    _verl(
        "engine_remove_padding",
        "verl/workers/engine_workers.py",
        "TrainingWorker.__init__",
        "self.engine_config.use_remove_padding = self.model_config",
    ),
    # verl's Megatron engine (placement.megatron, megatron_dcp).
    _verl("megatron_init_mesh", _IMPL, f"{_ENGINE}._init_device_mesh", "mpu.initialize_model_parallel("),
    _verl("megatron_mesh_reused", _IMPL, f"{_ENGINE}._init_device_mesh", "if mpu.is_initialized():"),
    _verl(
        "dcp_data_parallel_size",
        _IMPL,
        f"{_ENGINE}.get_data_parallel_size",
        "if self.engine_config.dynamic_context_parallel:",
        ">=0.8",
    ),
    _verl(
        "dcp_megatron_support",
        _IMPL,
        f"{_ENGINE}._init_device_mesh",
        '"dynamic_context_parallel" in inspect.signature(mpu.initialize_model_parallel).parameters',
        ">=0.8",
    ),
    _verl(
        "dcp_seqlen_positive",
        "verl/workers/config/engine.py",
        "McoreEngineConfig.__post_init__",
        "max_seqlen_per_dp_cp_rank must be a positive integer",
        ">=0.9",
    ),
    _verl(
        "dcp_seqlen_set",
        _IMPL,
        f"{_ENGINE}._init_device_mesh",
        "assert self.engine_config.max_seqlen_per_dp_cp_rank is not None",
        ">=0.8,<0.9",
    ),
    _verl(
        "dcp_seqlen_divides",
        "verl/utils/megatron_utils.py",
        "dynamic_cp_split_batch",
        "math.ceil(max_seq_len / max_seqlen_per_dp_cp_rank)",
        ">=0.8,<0.9",
    ),
    _verl(
        "dcp_language_models",
        _IMPL,
        "_check_dcp_unsupported_features",
        "Dynamic CP currently supports language models only",
        ">=0.9",
    ),
    _verl(
        "dcp_remove_padding",
        _IMPL,
        "_check_dcp_unsupported_features",
        "dynamic_context_parallel requires use_remove_padding=True",
        ">=0.9",
    ),
    _verl(
        "dcp_no_vpp",
        _IMPL,
        "_check_dcp_unsupported_features",
        "Dynamic CP does not support virtual pipeline parallelism",
        ">=0.9",
    ),
    _verl("dcp_world_size", _IMPL, "_validate_dcp_world_size", "dpcp_size < 2 or dpcp_size % 2 != 0", ">=0.9"),
    _verl(
        "dcp_same_in_process",
        _IMPL,
        f"{_ENGINE}._init_device_mesh",
        "initialized without dynamic DPxCP groups",
        ">=0.9",
    ),
    # Shared rollout (runtime/shared_rollout/hooks.py, placement.memory).
    _verl(
        "trainer_gets_client",
        "verl/trainer/ppo/ray_trainer.py",
        "RayPPOTrainer.init_workers",
        "llm_client=self.llm_server_manager.get_client()",
        ">=0.8",
    ),
    _verl(
        "nccl_buckets",
        "verl/checkpoint_engine/nccl_checkpoint_engine.py",
        "NCCLCheckpointEngine.prepare",
        "self.recv_buf = torch.zeros(self.bucket_size",
        ">=0.8",
    ),
    # megatron-core (placement.megatron, mesh).
    _mcore("mc_model_size", _PS, _INIT_MP, "if world_size % model_size != 0:"),
    _mcore("mc_vpp_needs_pp", _PS, _INIT_MP, "pipeline-model-parallel size should be greater than 1"),
    _mcore("mc_expert_size", _PS, _INIT_MP, "world_size % expert_tensor_model_pipeline_parallel_size != 0"),
    _mcore("mc_etp_default", _PS, _INIT_MP, "expert_tensor_parallel_size = tensor_model_parallel_size"),
    _mcore("mc_default_order", _PS, _INIT_MP, 'order: str = "tp-cp-ep-dp-pp"'),
    _mcore("mc_pp_last", _PS, _INIT_MP, 'order.endswith("pp")'),
    _mcore("mc_distopt_instances", _PS, _INIT_MP, "% num_distributed_optimizer_instances == 0"),
    _mcore("mc_ep_cp_apart", _PS, "RankGenerator.__init__", "ep == 1 or cp == 1"),
    _mcore(
        "mc_dense_no_ep",
        "megatron/core/transformer/transformer_config.py",
        "TransformerConfig.__post_init__",
        "num_moe_experts must be non None to use expert-parallel",
    ),
    _mcore(
        "mc_experts_over_ep",
        "megatron/core/transformer/moe/moe_layer.py",
        "BaseMoELayer.__init__",
        "assert self.config.num_moe_experts % ep_size == 0",
    ),
    _mcore(
        "mc_layers_over_pp",
        "megatron/core/transformer/transformer_block.py",
        "get_num_layers_to_build",
        "num_layers should be divisible by pipeline_model_parallel_size",
    ),
    _mcore(
        "mc_layers_over_vpp",
        "megatron/core/transformer/transformer_block.py",
        "get_num_layers_to_build",
        "num_layers_per_pipeline_rank % vp_size == 0",
    ),
    _mcore(
        "mc_interleaved_schedule",
        "megatron/core/pipeline_parallel/schedules.py",
        "get_forward_backward_func",
        "forward_backward_func = forward_backward_pipelining_with_interleaving",
    ),
    _mcore(
        "mc_group_at_least_pp",
        "megatron/core/pipeline_parallel/schedules.py",
        "forward_backward_pipelining_with_interleaving",
        "config.microbatch_group_size_per_vp_stage < pipeline_parallel_size",
    ),
    _mcore(
        "mc_group_default",
        "megatron/core/model_parallel_config.py",
        "ModelParallelConfig.__post_init__",
        "self.microbatch_group_size_per_vp_stage = self.pipeline_model_parallel_size",
    ),
)

#: Every row by its key.
CITATIONS: dict[str, Citation] = {row.key: row for row in ROWS}


def cite(key: str) -> str:
    """``symbol in path`` of row ``key``: what a message says for where verl or megatron-core enforces it."""
    return str(CITATIONS[key])
