"""What a broken batch rule is, and where each verl family asserts each rule (the function, in its file).

The rules are ``placement.batch_rules`` (and ``placement.batch_vpp`` for Megatron's virtual pipeline); each
citation is a row of ``core.citations``, checked against the installed verl by ``tests/core/test_citations.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_split.core.citations import CITATIONS, cite

_ENGINE_RULES: dict[str, str] = {
    "mini": cite("mini_batch_split"),
    "micro": cite("micro_batches"),
    "iterator": cite("mini_batch_iterator"),
    "balance": f"{cite('balance_batch')} (equal_size=True)",
    "chunk": cite("chunk_tensordict"),
    "vpp": cite("vpp_micro_groups"),
    "vpp_dynamic": f"{cite('seqlen_partitions')}, after {CITATIONS['seqlen_round_up'].symbol} rounds the count up",
}

#: Where each family asserts each rule: rule -> "function in file".
CITES: dict[str, dict[str, str]] = {
    "0.9": {**_ENGINE_RULES, "pad": cite("v1_batch_multiple")},
    "0.8": dict(_ENGINE_RULES),
    "0.7": {
        **_ENGINE_RULES,
        "legacy_chunk": cite("legacy_chunk"),
        "legacy_actor": cite("legacy_actor_batch"),
        "legacy_log_prob": cite("legacy_log_prob_batch"),
        "legacy_critic": cite("legacy_critic_batch"),
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
