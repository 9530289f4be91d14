"""The generation lane of a real job: :mod:`verl_split.tools.advise.generation`'s model, fitted to the runs.

Used when the job says enough: the GPU's memory (``--gpu-memory``), the actor's size (the memory rule's), and from
the job's config the batch (``data.train_batch_size`` x ``rollout.n``), the lengths (``data.max_prompt_length``,
``data.max_response_length``: upper bounds, so the KV demand is the worst case) and vLLM's share. The layers, KV
heads and head size come from the model config the workers printed in the log
(:func:`verl_split.tools.advise.job.model_shape`); else the layers from the actor's ``config.json`` and the KV width
*assumed* a quarter of the hidden size (grouped-query attention as in Llama-3, Qwen2.5 and Qwen3; full multi-head
attention has four times the KV cache). The bandwidth
is fitted to each run's measured generation, on the pool it ran on, at the job's rollout TP, beside the training
state the memory rule counts there. Otherwise generation keeps ``serial + parallel / n``, and the report says why.

The TP per pool is chosen among the job's rollout TP and its divisors: those hold whole replicas wherever the job's
TP does, so the planner's replica rule, checked at the job's TP, holds for them too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from verl_split.placement.job import Job
from verl_split.placement.job_config import as_job
from verl_split.placement.model import TRAIN_BATCH
from verl_split.tools.advise.generation import FIT, GenerationLane, RolloutJob, fit_bandwidth, seconds
from verl_split.tools.advise.pool_memory import MemoryRule
from verl_split.tools.advise.runs import Run

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
    points = tuple((gpus, seconds) for gpus, _, _, seconds in measured)
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
