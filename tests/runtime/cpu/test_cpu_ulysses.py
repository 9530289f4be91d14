"""The CPU dry run's Ulysses attention (``verl_split/runtime/cpu/ulysses.py``) against attention on one rank.

Two gloo processes form verl's sequence-parallel group (``verl.utils.ulysses``); each holds half of a packed
row of three sequences and calls the stand-in as verl's model would. Its output and the gradients of
query, key and value must be those of plain attention over the whole row on one process, sliced. Real
torch.distributed, real verl helpers; the only thing tested is ours.
"""

from __future__ import annotations

import pytest
from support.pyrun import run_json

pytestmark = pytest.mark.subprocess

SCRIPT = r"""
import json, os, socket, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HEADS, KV_HEADS, DIM, RANKS = 4, 2, 8, 2
LENGTHS = [3, 5, 4]  # three packed sequences, 12 tokens: 6 per rank (verl pads the row to a multiple of RANKS)


def reference(q, k, v):
    # attention over the whole packed row: each sequence causal on its own, kv heads repeated (GQA)
    k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
    seq = sum(LENGTHS)
    allowed = torch.zeros(seq, seq, dtype=torch.bool)
    start = 0
    for n in LENGTHS:
        allowed[start:start + n, start:start + n] = torch.ones(n, n, dtype=torch.bool).tril()
        start += n
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return out.transpose(1, 2)  # (batch, seq, heads, dim), as transformers' attention functions return


def inputs():
    torch.manual_seed(0)
    seq = sum(LENGTHS)
    q = torch.randn(1, HEADS, seq, DIM, dtype=torch.float64)
    k = torch.randn(1, KV_HEADS, seq, DIM, dtype=torch.float64)
    v = torch.randn(1, KV_HEADS, seq, DIM, dtype=torch.float64)
    positions = torch.cat([torch.arange(n) for n in LENGTHS]).unsqueeze(0)
    weight = torch.randn(1, seq, HEADS, DIM, dtype=torch.float64)
    return q, k, v, positions, weight


def run(rank, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    from verl.utils import ulysses
    from verl_split.runtime.cpu.ulysses import make_ulysses_sdpa

    ulysses.set_ulysses_sequence_parallel_group(dist.group.WORLD)
    q, k, v, positions, weight = inputs()
    part = slice(rank * q.size(2) // RANKS, (rank + 1) * q.size(2) // RANKS)
    local = [t[:, :, part].clone().requires_grad_(True) for t in (q, k, v)]

    def transformers_sdpa(*args, **kwargs):
        raise AssertionError("the SP group has 2 ranks: transformers' sdpa must not be called")

    attention = make_ulysses_sdpa(transformers_sdpa)
    out, weights = attention(object(), *local, None, dropout=0.0, scaling=None, position_ids=positions[:, part])
    (out * weight[:, part]).sum().backward()

    full = [t.clone().requires_grad_(True) for t in (q, k, v)]
    expected = reference(*full)
    (expected * weight).sum().backward()
    results[rank] = {
        "weights": weights,
        "out": (out - expected[:, part]).abs().max().item(),
        "grads": max((a.grad - b.grad[:, :, part]).abs().max().item() for a, b in zip(local, full)),
    }
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(run, args=(port, results), nprocs=RANKS)
    print(json.dumps(dict(results)))
"""


def test_ulysses_attention_equals_attention_over_the_whole_sequence(tmp_path):
    script = tmp_path / "ulysses_check.py"  # mp.spawn re-imports the main module: a file, not -c
    script.write_text(SCRIPT)
    results = run_json(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')", timeout=120)
    assert set(results) == {"0", "1"}
    for rank in results.values():
        assert rank["weights"] is None
        assert rank["out"] < 1e-12, rank
        assert rank["grads"] < 1e-12, rank
