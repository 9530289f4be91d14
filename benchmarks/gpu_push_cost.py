#!/usr/bin/env python3
"""What one GPU can measure of the late join's push, for a 7B and a 70B actor: torch alone, no verl, Ray or vLLM.

    python benchmarks/gpu_push_cost.py [--json out.json] [--repeats 3] [--bucket-mb 2048]

The late join pushes the actor's weights to the critic pool's replicas through verl's NCCL checkpoint engine:
the weights are cut into buckets of ``update_weights_bucket_megabytes`` (two buffers on every GPU of the push,
``verl/checkpoint_engine/nccl_checkpoint_engine.py``, ``prepare`` and ``send_weights``) and each bucket is
broadcast. One GPU cannot run the broadcast (it needs a second GPU and the wire), but it can measure the parts
that run on each GPU, and what the alternative design would cost (docs/shared-rollout.md#the-push-at-scale):

- ``context``: what a process's CUDA context takes, and a one-rank NCCL communicator after one collective,
  torch's and (where cupy is installed) cupy's, the push's (a lower bound of a communicator over many ranks),
  against the memory check's round allowance of 1 GiB a
  process (``verl_split.placement.memory.CONTEXT_GB_PER_PROCESS``);
- ``pack``: filling the two buckets with every weight of the model in bf16, as ``send_weights`` does, on the
  GPU, the broadcast left out;
- ``stage``: the export staged once in pinned host memory (GPU to host), and fed back to a GPU (host to
  GPU): the "one export, staged at the sync" design's time on each GPU and its host memory.

The shapes are Qwen2.5-7B's and Llama-3-70B's ``config.json`` (hidden size, intermediate size, layers, heads,
key-value heads, vocabulary; untied embeddings; Qwen's q/k/v biases). The 70B model does not fit one GPU beside
its buckets: its per-layer tensors are made once and packed for each of its 80 layers (the same bytes moved),
and its staging is the 7B's measured rate over its size, said so in the output. Needs CUDA; ``--allow-cpu``
runs the same code on a small model on CPU (the test of this script).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    qkv_bias: bool

    def layer_tensors(self) -> list[tuple[int, ...]]:
        head_dim = self.hidden // self.heads
        kv = self.kv_heads * head_dim
        shapes = [(self.hidden, self.hidden), (kv, self.hidden), (kv, self.hidden), (self.hidden, self.hidden)]
        if self.qkv_bias:
            shapes += [(self.hidden,), (kv,), (kv,)]
        shapes += [(self.intermediate, self.hidden)] * 2 + [(self.hidden, self.intermediate)]
        return shapes + [(self.hidden,), (self.hidden,)]  # the two norms

    def outer_tensors(self) -> list[tuple[int, ...]]:
        return [(self.vocab, self.hidden), (self.vocab, self.hidden), (self.hidden,)]  # embed, lm_head, norm

    def params(self) -> int:
        count = 0
        for shape in self.layer_tensors():
            count += self.layers * _numel(shape)
        return count + sum(_numel(shape) for shape in self.outer_tensors())


MODELS = {
    # Qwen/Qwen2.5-7B config.json
    "7B": Shape(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4, vocab=152064, qkv_bias=True),
    # meta-llama/Meta-Llama-3-70B config.json
    "70B": Shape(hidden=8192, intermediate=28672, layers=80, heads=64, kv_heads=8, vocab=128256, qkv_bias=False),
}
TINY = Shape(hidden=256, intermediate=512, layers=4, heads=4, kv_heads=2, vocab=1024, qkv_bias=True)
GIB = 1024**3


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _used_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def _smi_used_mib() -> float | None:
    """Memory in use on GPU 0 before this process makes a CUDA context (other processes), from nvidia-smi."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return float(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def measure_context(device: torch.device, before_mib: float | None) -> dict:
    """The CUDA context, then a one-rank NCCL communicator after one all-reduce."""
    torch.empty(1, device=device)
    _sync(device)
    after_context = _used_bytes(device)
    row = {"cuda_context_mib": None if before_mib is None else after_context / 2**20 - before_mib}
    if device.type != "cuda" or not torch.distributed.is_nccl_available():
        return row | {"nccl_one_rank_mib": None}
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, device_id=device)
    probe = torch.ones(1024, device=device)
    dist.all_reduce(probe)
    _sync(device)
    row["nccl_one_rank_mib"] = (_used_bytes(device) - after_context - probe.nbytes) / 2**20
    row["cupy_nccl_one_rank_mib"] = _cupy_nccl_mib(device)
    dist.destroy_process_group()
    return row


def _cupy_nccl_mib(device: torch.device) -> float | None:
    """A second communicator in the same process, cupy's NCCL: the push's (verl's NCCL engine broadcasts through
    ``ray.util.collective``, whose NCCL group is cupy's)."""
    try:
        import cupy
        from cupy.cuda import nccl
    except ImportError:
        return None
    before = _used_bytes(device)
    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    probe = cupy.ones(1024, dtype=cupy.float32)
    stream = cupy.cuda.Stream.null
    comm.allReduce(probe.data.ptr, probe.data.ptr, 1024, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    used = (_used_bytes(device) - before) / 2**20
    comm.destroy()
    return used


def pack_into_buckets(tensors: list[torch.Tensor], rounds: int, buckets: list[torch.Tensor]) -> int:
    """Copy every tensor (``rounds`` times over) into the two buckets in turn, as ``send_weights`` fills them."""
    size, offset, current, filled = buckets[0].numel(), 0, 0, 0
    for _ in range(rounds):
        for tensor in tensors:
            raw = tensor.view(-1).view(torch.uint8)
            start = 0
            while start < raw.numel():  # a tensor larger than a bucket goes in chunks
                if offset == size:
                    current, offset, filled = 1 - current, 0, filled + 1
                chunk = min(raw.numel() - start, size - offset)
                buckets[current][offset : offset + chunk].copy_(raw[start : start + chunk], non_blocking=True)
                offset, start = offset + chunk, start + chunk
    return filled + 1


def measure_model(name: str, shape: Shape, device: torch.device, bucket_bytes: int, repeats: int) -> dict:
    # The whole model, its buckets and a second copy's worth of headroom, or one layer packed once per layer.
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else float("inf")
    whole_fits = 2 * shape.params() * 2 + 2 * bucket_bytes < free
    layer_tensors = [torch.randn(s, dtype=torch.bfloat16, device=device) for s in shape.layer_tensors()]
    outer = [torch.randn(s, dtype=torch.bfloat16, device=device) for s in shape.outer_tensors()]
    layers = [layer_tensors] + (
        [
            [torch.randn(s, dtype=torch.bfloat16, device=device) for s in shape.layer_tensors()]
            for _ in range(shape.layers - 1)
        ]
        if whole_fits
        else []
    )
    flat = outer + [t for layer in layers for t in layer]
    rounds_of_layers = 1 if whole_fits else shape.layers
    model_bytes = shape.params() * 2
    buckets = [torch.empty(bucket_bytes, dtype=torch.uint8, device=device) for _ in range(2)]
    _sync(device)

    pack_s = []
    for _ in range(repeats):
        started = time.perf_counter()
        pack_into_buckets(outer, 1, buckets)
        count = pack_into_buckets(layers[0] if not whole_fits else flat[len(outer) :], rounds_of_layers, buckets)
        _sync(device)
        pack_s.append(time.perf_counter() - started)

    row = {
        "model": name,
        "params": shape.params(),
        "bf16_gib": model_bytes / GIB,
        "bucket_mib": bucket_bytes / 2**20,
        "buckets_filled": count,
        "pack_s": pack_s,
        "pack_gb_s": model_bytes / 1e9 / statistics.median(pack_s),
        "whole_model_on_gpu": whole_fits,
    }
    if whole_fits:
        row |= measure_staging(flat, device, repeats)
    del layers, outer, flat, buckets, layer_tensors
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def measure_staging(tensors: list[torch.Tensor], device: torch.device, repeats: int) -> dict:
    """The whole export into one pinned host buffer, and back to the GPU."""
    total = sum(t.numel() * 2 for t in tensors)
    pin = device.type == "cuda"
    started = time.perf_counter()
    host = torch.empty(total, dtype=torch.uint8, pin_memory=pin)
    alloc_s = time.perf_counter() - started
    d2h, h2d = [], []
    for _ in range(repeats):
        started, offset = time.perf_counter(), 0
        for tensor in tensors:
            raw = tensor.view(-1).view(torch.uint8)
            host[offset : offset + raw.numel()].copy_(raw, non_blocking=pin)
            offset += raw.numel()
        _sync(device)
        d2h.append(time.perf_counter() - started)
        started, offset = time.perf_counter(), 0
        for tensor in tensors:
            raw = tensor.view(-1).view(torch.uint8)
            raw.copy_(host[offset : offset + raw.numel()], non_blocking=pin)
            offset += raw.numel()
        _sync(device)
        h2d.append(time.perf_counter() - started)
    return {
        "pinned_alloc_s": alloc_s,
        "gpu_to_host_s": d2h,
        "host_to_gpu_s": h2d,
        "gpu_to_host_gb_s": total / 1e9 / statistics.median(d2h),
        "host_to_gpu_gb_s": total / 1e9 / statistics.median(h2d),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bucket-mb", type=int, default=2048, help="verl's update_weights_bucket_megabytes")
    parser.add_argument("--allow-cpu", action="store_true", help="no CUDA: run the code on a small model on CPU")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.allow_cpu:
        print(
            "gpu_push_cost: no CUDA device here; it measures a GPU (--allow-cpu runs it small on CPU)", file=sys.stderr
        )
        return 2
    before = _smi_used_mib() if torch.cuda.is_available() else None
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    models = MODELS if device.type == "cuda" else {"tiny": TINY}
    bucket_bytes = args.bucket_mb * 2**20 if device.type == "cuda" else 2**20
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "repeats": args.repeats,
        "context": measure_context(device, before),
        "models": [],
    }
    for name, shape in models.items():
        result["models"].append(measure_model(name, shape, device, bucket_bytes, args.repeats))
    staged = next((m for m in result["models"] if "gpu_to_host_gb_s" in m), None)
    for row in result["models"]:
        if "gpu_to_host_gb_s" not in row and staged:
            row["gpu_to_host_s_at_measured_rate"] = row["bf16_gib"] * GIB / 1e9 / staged["gpu_to_host_gb_s"]
            row["host_to_gpu_s_at_measured_rate"] = row["bf16_gib"] * GIB / 1e9 / staged["host_to_gpu_gb_s"]
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    sys.exit(main())
