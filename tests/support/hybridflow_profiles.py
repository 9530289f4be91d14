"""Phase profiles of HybridFlow's placement experiments (EuroSys'25, arXiv 2409.19256v2 §8.3), for ``advise``.

HybridFlow publishes no per-phase times, so each profile is derived, and every number says where it comes from:

* the job (§8.1, as read from the paper; not re-checked in this session): Llama-2 models, 1024 prompts a step,
  prompts and responses of 1024 tokens, one PPO epoch, A100-80GB GPUs, 8 to a machine, 16 to 128 GPUs;
* the models' shapes: Llama-2's published ``config.json`` (7B: 32 layers, 32 KV heads; 13B: 40, 40; 70B: 80, 8;
  head size 128), 34B as CodeLlama-34B's (48 layers, 8 KV heads), HybridFlow's 34B being Llama-2's unreleased
  size; the parameter counts the model names give;
* the training lanes: FLOPs (6 x params x tokens for an update, 2 x for a forward) at an assumed 40 % of the
  A100's 312 TFLOP/s on one GPU, scaling as Amdahl's ``serial + parallel / n``, the serial share of one GPU's time
  ``s`` solving ``(1 + 7s) / (1 + 127s) = 0.668``: the 8 -> 128-GPU strong-scaling efficiency HybridFlow reports
  (§8.2, 66.8 % on average), applied to each training lane;
* the memory at generation: each model's bf16 weights on its pool (2 bytes a parameter, sharded), the optimizer
  states and gradients offloaded for generation (our assumption: at 16 bytes a parameter, four 34B models do
  not fit 16 GPUs at all, and HybridFlow ran them colocated there), plus 2 GiB of contexts; the reference is the
  actor's size and the reward model the critic's (§8.1: "the reference and reward models are of the same size as
  the actor and critic", as read);
* generation: :mod:`verl_split.tools.advise.generation` at A100-80GB's 2.0 TB/s (NVIDIA's datasheet: 2,039 GB/s)
  with vLLM given all the memory the states leave (HybridFlow's rollout takes what training leaves, §5), the
  rollout TP chosen per pool among 1, 2, 4 and 8 as HybridFlow's auto-mapping does (§6).

HybridFlow puts the reward model on the critic's side of a split (§8.3): its forward is in the critic's
preparation lane here. Not modelled: HybridFlow's "standalone" placement (each model on its own GPUs), and
re-choosing the training lanes' parallelism per pool.
"""

from __future__ import annotations

from verl_split.placement import Cluster
from verl_split.tools.advise.candidates import rank
from verl_split.tools.advise.generation import ASSUMED, TPS, GenerationLane, RolloutJob
from verl_split.tools.advise.model import FIT_LINEAR, CostModel, LaneModel

#: name -> (parameters, layers, KV heads, head size).
SHAPES = {
    "7B": (7e9, 32, 32, 128),
    "13B": (13e9, 40, 40, 128),
    "34B": (34e9, 48, 8, 128),
    "70B": (70e9, 80, 8, 128),
}
PROMPTS = 1024
PROMPT_LEN = RESPONSE_LEN = 1024
TOKENS = PROMPTS * (PROMPT_LEN + RESPONSE_LEN)
GPU_GB = 80 * 1e9 / 2**30  # 80 GB
PEAK_FLOPS, TRAIN_MFU = 312e12, 0.40
#: HybridFlow §8.2: 66.8 % strong-scaling efficiency from 8 to 128 GPUs, on average.
SCALING_EFFICIENCY = 0.668
#: One GPU's serial share s with (1 + 7s) / (1 + 127s) = 0.668 (Amdahl, efficiency of 128 GPUs against 8).
SERIAL_SHARE = (1 - SCALING_EFFICIENCY) / (127 * SCALING_EFFICIENCY - 7)
BANDWIDTH = 2.0e12
GPU_COUNTS = (16, 32, 64, 96, 128)
#: (actor, critic) of §8.3's figures: Fig. 12's two sizes, Fig. 13's 13B actor with a 70B critic.
PAIRS = (("13B", "13B"), ("34B", "34B"), ("13B", "70B"))
#: What HybridFlow measured fastest (§8.3, Figs. 12-13, as the memo reads them): per pair and GPU count.
PUBLISHED = {
    ("13B", "13B"): {16: "colocate", 32: "colocate", 64: "colocate", 96: "split", 128: "standalone"},
    ("34B", "34B"): {16: "colocate", 32: "colocate", 64: "colocate", 96: "split", 128: "split"},
    ("13B", "70B"): {16: "colocate", 32: "colocate", 64: "colocate", 96: "split", 128: "split"},
}


def kv_bytes_per_token(name: str) -> float:
    _, layers, kv_heads, head = SHAPES[name]
    return 2 * layers * kv_heads * head * 2


def amdahl(lane: str, flops: float) -> LaneModel:
    one_gpu = flops / (PEAK_FLOPS * TRAIN_MFU)
    return LaneModel(lane, one_gpu * SERIAL_SHARE, one_gpu * (1 - SERIAL_SHARE), FIT_LINEAR, ())


def profile(actor: str, critic: str) -> CostModel:
    pa, pc = SHAPES[actor][0], SHAPES[critic][0]

    def resident_gb(gpus: int, colocated: bool) -> float:
        states = 2 * pa + 2 * pa  # the actor's and the reference's bf16 weights
        if colocated:
            states += 2 * pc + 2 * pc  # the critic's and the reward model's
        return states / gpus / 2**30 + 2.0

    job = RolloutJob(pa, kv_bytes_per_token(actor), SHAPES[actor][1], PROMPTS, PROMPT_LEN, RESPONSE_LEN, GPU_GB)
    gen = GenerationLane(job, BANDWIDTH, resident_gb, TPS, 8, ASSUMED)
    lanes = {
        "gen": gen,
        "actor_prep": amdahl("actor_prep", 2 * 2 * pa * TOKENS),  # old_log_prob + ref
        "critic_prep": amdahl("critic_prep", 2 * 2 * pc * TOKENS),  # values + the reward model
        "actor_update": amdahl("actor_update", 6 * pa * TOKENS),
        "critic_update": amdahl("critic_update", 6 * pc * TOKENS),
    }
    return CostModel(lanes=lanes, fixed_s=0.0)  # type: ignore[arg-type]


def kind(placement: str, colocated: bool, actor_gpus: int, critic_gpus: int) -> str:
    if colocated:
        return "colocate"
    return "split" if actor_gpus == critic_gpus else f"split {actor_gpus}+{critic_gpus}"


def first_ranked(actor: str, critic: str, gpus: int) -> tuple[str, str, float, int | None]:
    """advise's first candidate on this pair and cluster: (kind, placement, speed-up vs colocated, rollout TP)."""
    model = profile(actor, critic)
    candidates, _ = rank(model, Cluster(gpus // 8, 8))
    best = candidates[0]
    p = best.prediction
    chosen = model.lanes["gen"].choose(p.actor_gpus, p.colocated)  # type: ignore[union-attr]
    return (
        kind(best.placement, p.colocated, p.actor_gpus, p.critic_gpus),
        best.placement,
        best.speedup_vs_stock,
        (chosen[0] if chosen else None),
    )


def table() -> list[tuple[str, int, str, str, str, float, int | None]]:
    rows = []
    for actor, critic in PAIRS:
        for gpus in GPU_COUNTS:
            got, placement, speedup, tp = first_ranked(actor, critic, gpus)
            rows.append((f"{actor} / {critic}", gpus, PUBLISHED[(actor, critic)][gpus], got, placement, speedup, tp))
    return rows


if __name__ == "__main__":
    for row in table():
        print(" | ".join(str(v) if not isinstance(v, float) else f"{v:.2f}x" for v in row))
