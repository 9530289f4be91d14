"""What a broken batch rule is, and where each verl family asserts each rule (file:line, the function).

The rules are ``placement.batch_rules`` (and ``placement.batch_vpp`` for Megatron's virtual pipeline);
line numbers of 0.7.1, 0.8.0 and 0.9.1.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where each family asserts each rule: (file:line, the function).
CITES: dict[str, dict[str, str]] = {
    "0.9": {
        "mini": "verl/workers/engine_workers.py:267 (TrainingWorker.train_mini_batch)",
        "micro": "verl/workers/engine/utils.py:125 (prepare_micro_batches)",
        "iterator": "verl/utils/tensordict_utils.py:588 (make_iterator)",
        "balance": "verl/trainer/ppo/ray_trainer.py:1235 (_balance_batch, equal_size=True)",
        "chunk": "verl/utils/tensordict_utils.py:341 (chunk_tensordict)",
        "pad": "verl/trainer/ppo/v1/trainer_base.py:1589-1606 (_get_required_batch_multiple)",
        "vpp": "verl/workers/engine/megatron/transformer_impl.py:873-877,914-917 (forward_backward_batch)",
        "vpp_dynamic": "verl/utils/seqlen_balancing.py:239 (get_seqlen_balanced_partitions, after :408 rounds up)",
    },
    "0.8": {
        "mini": "verl/workers/engine_workers.py:258 (TrainingWorker.train_mini_batch)",
        "micro": "verl/workers/engine/utils.py:91 (prepare_micro_batches)",
        "iterator": "verl/utils/tensordict_utils.py:588 (make_iterator)",
        "balance": "verl/trainer/ppo/ray_trainer.py:1201 (_balance_batch, equal_size=True)",
        "chunk": "verl/utils/tensordict_utils.py:341 (chunk_tensordict)",
        "vpp": "verl/workers/engine/megatron/transformer_impl.py:615-619,629-632 (forward_backward_batch)",
        "vpp_dynamic": "verl/utils/seqlen_balancing.py:239 (get_seqlen_balanced_partitions, after :407 rounds up)",
    },
    "0.7": {
        "mini": "verl/workers/engine_workers.py:239 (TrainingWorker.train_mini_batch)",
        "micro": "verl/workers/engine/utils.py:92 (prepare_micro_batches)",
        "iterator": "verl/utils/tensordict_utils.py:556 (make_iterator)",
        "balance": "verl/trainer/ppo/ray_trainer.py:1071 (_balance_batch, equal_size=True)",
        "chunk": "verl/utils/tensordict_utils.py:315 (chunk_tensordict)",
        "vpp": "verl/workers/engine/megatron/transformer_impl.py:541-545,555-558 (forward_backward_batch)",
        "vpp_dynamic": "verl/utils/seqlen_balancing.py:239 (get_seqlen_balanced_partitions, after :407 rounds up)",
        "legacy_chunk": "verl/protocol.py:873 (DataProto.chunk)",
        "legacy_actor": "verl/workers/fsdp_workers.py:249-270 (ActorRolloutRefWorker.__init__)",
        "legacy_log_prob": "verl/workers/fsdp_workers.py:273-281 (ActorRolloutRefWorker.__init__)",
        "legacy_critic": "verl/workers/fsdp_workers.py:1338-1358 (CriticWorker.__init__)",
    },
}


#: When 0.7's legacy workers assert their batch sizes: in their constructors.
WORKERS_START = "when its workers start"


@dataclass(frozen=True)
class Problem:
    """One rule a pool breaks: who, what (with the numbers), where verl asserts it, what to change."""

    role: str
    text: str
    cite: str
    keys: tuple[str, ...]
    #: When verl stops on it: most rules in the first step, after a whole generation.
    when: str = "in the first step, after a whole generation"
