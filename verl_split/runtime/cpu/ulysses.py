"""Ulysses sequence parallelism in the CPU dry run: verl's all-to-all around sdpa attention.

With ``ulysses_sequence_parallel_size`` > 1 verl splits each role's ranks into a data-parallel x
sequence-parallel mesh: the ranks of an SP group receive the same micro-batches, each takes a slice of
the packed sequence (``verl/utils/ulysses.py`` ``ulysses_pad_and_slice_inputs``), and verl collects the
outputs from SP rank 0 only (``is_mp_src_rank_with_outputs``). Inside attention, verl inserts an
all-to-all -- gather the sequence, scatter the heads, and back -- around *flash-attention* only
(``verl/models/transformers/monkey_patch.py`` ``_ulysses_flash_attention_forward``). flash-attn has no
CPU build, and the dry run attends with sdpa, which would see its rank's slice of the sequence alone.

This is a stand-in for the kernel, nothing more: on the CPU device, when verl's SP group has more than
one rank, sdpa gets the same all-to-all, with verl's own ``gather_seq_scatter_heads`` /
``gather_heads_scatter_seq`` over verl's SP group (gloo carries ``all_to_all``), and the mask that
flash-attention's varlen kernel applies to packed sequences: causal within each sequence, a sequence
starting where ``position_ids`` is 0 (verl pads the packed row with ``arange`` positions, a sequence of its
own). The mesh, the slicing, the gathered outputs, verl's dispatch and collect are verl's. Every other
call goes to transformers' own sdpa. ``tests/runtime/cpu/test_cpu_ulysses.py`` checks the result against attention over
the whole sequence on one rank.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from verl_split.plugin.seam import Undo


def packed_causal_mask(position_ids: Any) -> Any:
    """(batch, 1, seq, seq) bool: token i sees token j when both are in one packed sequence and j <= i."""
    import torch

    sequence = torch.cumsum(position_ids == 0, dim=-1)
    same = sequence[:, :, None] == sequence[:, None, :]
    seq = position_ids.size(-1)
    causal = torch.ones(seq, seq, dtype=torch.bool, device=position_ids.device).tril()
    return (same & causal).unsqueeze(1)


def _gather_positions(position_ids: Any, group: Any, ranks: int) -> Any:
    import torch
    import torch.distributed as dist

    parts = [torch.empty_like(position_ids) for _ in range(ranks)]
    dist.all_gather(parts, position_ids.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


def make_ulysses_sdpa(sdpa: Callable[..., Any]) -> Callable[..., Any]:
    """transformers' sdpa attention, with verl's Ulysses all-to-all around it when an SP group is active."""

    def ulysses_sdpa_attention(module, query, key, value, attention_mask, *args, **kwargs):
        from verl.utils import ulysses

        position_ids = kwargs.get("position_ids")
        ranks = ulysses.get_ulysses_sequence_parallel_world_size()
        if ranks <= 1 or position_ids is None or position_ids.dim() != 2:
            return sdpa(module, query, key, value, attention_mask, *args, **kwargs)
        import torch

        # (batch, heads, seq/sp, dim) -> verl's layout (batch, seq/sp, heads, dim). kv heads repeated up to the
        # query's first (GQA), so that every rank holds whole kv heads for its query heads after the scatter.
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))
        groups = q.size(2) // k.size(2)
        k, v = (t.repeat_interleave(groups, dim=2) for t in (k, v))
        q, k, v = (ulysses.gather_seq_scatter_heads(t, seq_dim=1, head_dim=2) for t in (q, k, v))
        group = ulysses.get_ulysses_sequence_parallel_group()
        mask = packed_causal_mask(_gather_positions(position_ids, group, ranks))
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            dropout_p=kwargs.get("dropout", 0.0),
            scale=kwargs.get("scaling"),
        )
        # (batch, heads/sp, seq, dim) -> (batch, seq/sp, heads, dim): what transformers' sdpa returns.
        return ulysses.gather_heads_scatter_seq(out.transpose(1, 2), seq_dim=1, head_dim=2), None

    ulysses_sdpa_attention.wrapped_sdpa = sdpa
    return ulysses_sdpa_attention


def install(target: ModuleType, undo: Undo) -> None:
    """Route ``attn_implementation="sdpa"`` through :func:`make_ulysses_sdpa` in this process (CPU mode only).

    transformers looks attention functions up by name in ``AttentionInterface``'s global mapping at every
    call (``ALL_ATTENTION_FUNCTIONS.get_interface``); its public ``register`` replaces an entry. Unpatch puts
    transformers' own function back.
    """
    from verl_split.runtime.cpu import on_cpu

    interface = target.AttentionInterface
    sdpa = interface._global_mapping["sdpa"]
    if not on_cpu() or hasattr(sdpa, "wrapped_sdpa"):
        return
    interface.register("sdpa", make_ulysses_sdpa(sdpa))
    undo.call(lambda: interface.register("sdpa", sdpa))
