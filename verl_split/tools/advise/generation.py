"""Generation as it scales: a lane that depends on the rollout's tensor parallelism and the KV-cache room per GPU.

HybridFlow (EuroSys'25, §8.4, Fig. 15) shows why ``serial + parallel / n`` cannot carry generation across
placements: its time depends on the rollout TP and on the KV cache each GPU has room for (what the model's shard
and the training states leave), and choosing the TP per placement cut its latency by 60.3 % (7B) and 36.4 %
(13B). This module is that dependence, in the terms of a memory-bound decoder with continuous batching (vLLM):

* a replica of TP ``t`` holds the weights ``W = 2 x params`` bytes (bf16) split over its ``t`` GPUs; each GPU's
  KV room is ``K = room - W / t``, ``room`` = vLLM's share of the GPU (``gpu_memory_utilization`` x its memory),
  or what the training states leave when less;
* every sequence needs ``kv_token x (prompt + response)`` bytes of KV cache (``kv_token`` = 2 x layers x KV heads
  x head size x 2 bytes, from the model's shape); ``D`` = all sequences' over the pool, per GPU;
* each decode step reads the GPU's weight shard and the KV cache in use: ``(W / t + min(D, K)) / bandwidth``,
  plus ``2 x layers`` TP all-reduces of ``TP_ALLREDUCE_S x log2(t)`` (assumed);
* ``response`` decode steps a wave, ``max(1, D / K)`` waves (sequences that do not fit wait for room), plus the
  prefill, ``2 x params x prompt tokens / (GPUs x peak FLOP/s x PREFILL_MFU)``.

So: on few GPUs generation is bound by KV room (waves, ~1/n); on many it reaches its latency floor (one wave:
the weight reads per step do not shrink with more replicas), which is what makes a split's smaller actor pool
free at 96-128 GPUs. The bandwidth is *fitted*: one scale that makes the model match the runs' generation times
(``fit``); the shape above, the all-reduce cost and the prefill's MFU are assumed, and the report says so.

Fitted to a real job (``generation_lane``), when the job says enough: the GPU's memory (``--gpu-memory``), the
actor's size (the memory rule's), and from the job's config the batch (``data.train_batch_size`` x ``rollout.n``),
the lengths (``data.max_prompt_length``, ``data.max_response_length``: upper bounds, so the KV demand is the worst
case) and vLLM's share. The layers, KV heads and head size come from the model config the workers printed in the
log (:func:`verl_split.tools.advise.log_job.model_shape`); else the layers from the actor's ``config.json`` and the KV
width *assumed* a quarter of the hidden size (grouped-query attention as in Llama-3, Qwen2.5 and Qwen3; full
multi-head attention has four times the KV cache). The bandwidth is fitted to each run's measured generation, on
the pool it ran on, at the job's rollout TP, beside the training state the memory rule counts there. Otherwise
generation keeps ``serial + parallel / n``, and the report says why.

The TP per pool is chosen among the job's rollout TP and its divisors: those hold whole replicas wherever the job's
TP does, so the planner's replica rule, checked at the job's TP, holds for them too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_split.placement.job import Job
from verl_split.placement.job_config import as_job
from verl_split.placement.model import TRAIN_BATCH
from verl_split.tools.advise.pool_memory import MemoryRule
from verl_split.tools.advise.runs import Run

GIB = 1024**3
#: One TP all-reduce's latency per log2(t) (NVLink, small messages): assumed.
TP_ALLREDUCE_S = 1.5e-5
#: The prefill's share of peak FLOP/s: assumed.
PREFILL_MFU = 0.5
#: TP sizes HybridFlow's auto-mapping and verl try: powers of two within a node.
TPS = (1, 2, 4, 8)
FIT = "KV-room model, bandwidth fitted"
ASSUMED = "KV-room model, bandwidth assumed"


@dataclass(frozen=True)
class RolloutJob:
    """What generation's time depends on, per step of the job."""

    params: float  # the actor's parameters
    kv_bytes_per_token: float  # K and V over all layers, bf16, for one token
    layers: int
    sequences: int  # train_batch_size x rollout.n
    prompt_len: int
    response_len: int
    gpu_gb: float
    vllm_share: float | None = None  # rollout.gpu_memory_utilization; None: all that the states leave
    peak_flops: float = 312e12  # A100 bf16 dense (NVIDIA's datasheet); only the prefill uses it
    #: Tokens a sequence holds in the KV cache on average (the runs' mean lengths); None: prompt + response.
    kv_len: float | None = None


def seconds(
    job: RolloutJob, gpus: int, tp: int, resident_gb: float, bandwidth: float, per_node: int | None = None
) -> float | None:
    """Generation's seconds on ``gpus`` GPUs at TP ``tp``; None where a replica cannot hold the weights and some
    KV cache, or the GPUs do not make whole replicas (of at most ``per_node`` GPUs)."""
    if gpus % tp or (per_node is not None and (tp > per_node or per_node % tp)):
        return None
    memory = job.gpu_gb * GIB
    room = memory - resident_gb * GIB
    if job.vllm_share is not None:
        room = min(room, job.vllm_share * memory)
    weights = 2 * job.params / tp
    kv_room = room - weights
    # The KV cache a sequence holds: its mean length when the runs logged it; the decode steps run to the longest.
    seq_bytes = job.kv_bytes_per_token * (job.kv_len or job.prompt_len + job.response_len) / tp
    if kv_room < seq_bytes:  # not even one sequence beside the weights
        return None
    demand = job.sequences * seq_bytes * tp / gpus  # per GPU, all sequences at once
    waves = max(1.0, demand / kv_room)
    step = (weights + min(demand, kv_room)) / bandwidth + 2 * job.layers * TP_ALLREDUCE_S * math.log2(tp)
    prefill = 2 * job.params * job.sequences * job.prompt_len / (gpus * job.peak_flops * PREFILL_MFU)
    return waves * job.response_len * step + prefill


def best_tp(
    job: RolloutJob,
    gpus: int,
    resident_gb: float,
    bandwidth: float,
    tps: Sequence[int] = TPS,
    per_node: int | None = None,
) -> tuple[int, float] | None:
    """The fastest TP for this pool (HybridFlow re-chooses it per placement), and its seconds; None: none fits."""
    found = [(s, tp) for tp in tps if (s := seconds(job, gpus, tp, resident_gb, bandwidth, per_node)) is not None]
    return None if not found else min(found)[::-1]


@dataclass(frozen=True)
class GenerationLane:
    """The generation lane on this model, in the shape of ``model.LaneModel`` (``time``, ``fit``, ``points``)."""

    job: RolloutJob
    bandwidth: float
    resident_gb: Callable[[int, bool], float]  # (pool GPUs, colocated) -> training state per GPU at generation
    tps: tuple[int, ...]
    per_node: int | None
    fit: str
    points: tuple[tuple[int, float], ...] = field(default=())
    lane: str = "gen"
    serial_s: float = 0.0  # not Amdahl's: kept for the report's columns
    parallel_s: float = 0.0

    def time(self, gpus: int, colocated: bool = False) -> float:
        best = self.choose(gpus, colocated)
        return math.inf if best is None else best[1]

    def choose(self, gpus: int, colocated: bool = False) -> tuple[int, float] | None:
        return best_tp(self.job, gpus, self.resident_gb(gpus, colocated), self.bandwidth, self.tps, self.per_node)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted({n for n, _ in self.points}))

    def to_json(self) -> dict[str, Any]:
        return {
            "pool": "actor",
            "fit": self.fit,
            "bandwidth_gb_s": self.bandwidth / 1e9,
            "rollout_tps": list(self.tps),
            "measured": [{"gpus": n, "mean_s": t} for n, t in self.points],
            "assumed": {"tp_allreduce_s": TP_ALLREDUCE_S, "prefill_mfu": PREFILL_MFU},
        }


def fit_bandwidth(
    job: RolloutJob,
    measured: Sequence[tuple[int, int, float, float]],
    prior: float = 2.0e12,
) -> float:
    """The bandwidth that makes the model match the runs: ``measured`` = (GPUs, TP, resident GiB, seconds).

    Time is near ``1 / bandwidth`` (the prefill and all-reduces aside), so a few rounds of rescaling settle it."""
    bandwidth = prior
    for _ in range(8):
        ratios = []
        for gpus, tp, resident, observed in measured:
            predicted = seconds(job, gpus, tp, resident, bandwidth)
            if predicted is not None and predicted > 0 and observed > 0:
                ratios.append(predicted / observed)
        if not ratios:
            return prior
        bandwidth *= math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return bandwidth


# -- the lane fitted to a job's runs ---------------------------------------------------------------
#: KV heads x head size as a share of the hidden size, when the model's shape is not read: assumed.
KV_WIDTH_SHARE = 0.25


def generation_lane(
    runs: Sequence[Run], config: Job | Any, memory: MemoryRule, rollout_tp: int, per_node: int
) -> tuple[GenerationLane | None, str]:
    """The fitted lane, or None and why not (one sentence for the report). ``config``: the job's view, or its
    config (None: the log has none) to read it from."""
    if memory.gpu_gb is None:
        return None, "generation scales as serial + parallel / n: the KV-room model needs --gpu-memory"
    params = memory.actor_params
    view = as_job({} if config is None else config)
    batch, prompt, response = view.batch.get(TRAIN_BATCH), view.batch.max_prompt_length, view.batch.max_response_length
    if not params or not all(isinstance(v, int) and v > 0 for v in (batch, prompt, response)):
        return None, (
            "generation scales as serial + parallel / n: the KV-room model needs the actor's size and the job's "
            "data.train_batch_size, max_prompt_length and max_response_length (a log with verl's printed config)"
        )
    n = view.rollout.n
    printed = next((run.model_shape for run in runs if run.model_shape), None)
    if printed is not None:  # the shape the workers printed: the KV cache per token as it is
        layers, kv_width = printed["layers"], printed["kv_heads"] * printed["head_dim"]
        shape_source = "the model config the log prints"
    else:
        layers = view.actor.model.shape.layers
        # A typical depth for the size, when neither the log nor a config.json says: assumed.
        layers = layers or max(1, round((params / 1.2e7) ** (1 / 3) * 4))
        kv_width = KV_WIDTH_SHARE * math.sqrt(params / (12 * layers))  # params ~ 12 x layers x hidden^2
        shape_source = "the KV width a quarter of the hidden size assumed"
    job = RolloutJob(
        params=params,
        kv_bytes_per_token=2 * layers * kv_width * 2,
        layers=layers,
        sequences=batch * (n if n is not None and n > 0 else 1),
        prompt_len=prompt,
        response_len=response,
        gpu_gb=memory.gpu_gb,
        vllm_share=view.rollout.gpu_memory_utilization,
        kv_len=next((run.mean_tokens for run in runs if run.mean_tokens), None),
    )

    def resident_gb(gpus: int, colocated: bool) -> float:
        need = memory.needs(gpus, gpus, colocated)[0]
        return need.generation_gb if need.generation_gb is not None else 0.0

    measured = [
        (run.gpus_of("gen"), rollout_tp, resident_gb(run.gpus_of("gen"), run.colocated), run.lanes["gen"].mean)
        for run in runs
        if "gen" in run.lanes and not run.shared_rollout
    ]
    if not measured:
        return None, "generation scales as serial + parallel / n: no run measured it on the actor pool alone"
    if any(seconds(job, gpus, tp, resident, 1e12) is None for gpus, tp, resident, _ in measured):
        # The runs generated where the model finds no room: a size is off (the GPU's, the model's).
        return None, (
            "generation scales as serial + parallel / n: the KV-room model finds no room for the KV cache where the "
            "runs generated; check --gpu-memory and the models' sizes"
        )
    tps = tuple(tp for tp in (1, 2, 4, 8, 16) if rollout_tp % tp == 0)
    bandwidth = fit_bandwidth(job, measured)
    points = tuple((gpus, took) for gpus, _, _, took in measured)
    lane = GenerationLane(job, bandwidth, resident_gb, tps, per_node, FIT, points)
    return lane, (
        f"generation by the KV-room model (generation.py): bandwidth fitted to the runs' generation, "
        f"{bandwidth / 1e9:.0f} GB/s; the rollout TP chosen per pool among {', '.join(map(str, tps))}; the KV "
        f"cache per token from {shape_source}; "
        + (
            "the KV cache held at the runs' mean lengths, decoding to the longest"
            if job.kv_len
            else "the lengths at their maximum assumed"
        )
    )
