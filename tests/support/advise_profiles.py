"""Synthetic profiles for ``verl-split advise``: metrics files as verl's ``file`` logger writes them, from a
known per-lane profile ``serial + parallel / n``. The advise tests and the README's example use them. Not
measurements.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

#: lane -> (serial s, parallel s): a step's work in each lane, t(n) = serial + parallel / n.
Profile = Mapping[str, tuple[float, float]]

#: Near-linear scaling (1 % serial): colocating everything wins (HybridFlow, up to 64 GPUs).
NEAR_LINEAR: Profile = {
    "gen": (0.1, 160.0),
    "actor_prep": (0.03, 32.0),
    "critic_prep": (0.03, 32.0),
    "actor_update": (0.05, 64.0),
    "critic_update": (0.05, 64.0),
}
#: Strongly sublinear scaling (large serial parts): a split wins (HybridFlow, 96-128 GPUs).
SUBLINEAR: Profile = {
    "gen": (8.0, 16.0),
    "actor_prep": (3.0, 8.0),
    "critic_prep": (3.0, 8.0),
    "actor_update": (5.0, 16.0),
    "critic_update": (5.0, 16.0),
}
FIXED_S = 1.0  # adv + the rest
#: Per-step noise around the profile in the steady steps (+, -, +, ...); step 1 pays start-up.
JITTER = 0.02
FIRST_STEP_EXTRA_S = 30.0


def lane(profile: Profile, name: str, n: int) -> float:
    serial, parallel = profile[name]
    return serial + parallel / n


def stock_step(profile: Profile, n: int, scale: float = 1.0) -> dict[str, float]:
    """One stock step's metrics on one pool of ``n`` GPUs (verl's timers only)."""
    t = {name: lane(profile, name, n) * scale for name in profile}
    data = {
        "timing_s/gen": t["gen"],
        "timing_s/old_log_prob": t["actor_prep"] * 0.6,
        "timing_s/ref": t["actor_prep"] * 0.4,
        "timing_s/values": t["critic_prep"],
        "timing_s/adv": FIXED_S * 0.25,
        "timing_s/update_critic": t["critic_update"],
        "timing_s/update_actor": t["actor_update"],
    }
    data["timing_s/step"] = sum(data.values()) + FIXED_S * 0.75
    return data


def split_step(profile: Profile, actor_n: int, critic_n: int, scale: float = 1.0) -> dict[str, float]:
    """One step's metrics under split placement with both overlaps: verl's timers measure waits there."""
    a = {name: lane(profile, name, actor_n) * scale for name in ("gen", "actor_prep", "actor_update")}
    c = {name: lane(profile, name, critic_n) * scale for name in ("critic_prep", "critic_update")}
    prep_wall = max(a["actor_prep"], c["critic_prep"])
    update_wall = max(a["actor_update"], c["critic_update"])
    data = {
        "timing_s/gen": a["gen"],
        "timing_s/old_log_prob": a["actor_prep"],
        "timing_s/values": 0.001,  # the wait for values already computed
        "timing_s/adv": FIXED_S * 0.25,
        "timing_s/update_critic": update_wall,
        "timing_s/update_actor": 0.002,  # the wait for an update already under way
        "split/prep_actor_s": a["actor_prep"],
        "split/prep_critic_s": c["critic_prep"],
        "split/prep_wall_s": prep_wall,
        "split/actor_update_s": a["actor_update"],
        "split/critic_update_s": c["critic_update"],
        "split/update_wall_s": update_wall,
        "split/overlapped": 1.0,
        "split/prep_overlapped": 1.0,
        "split/actor_pool_gpus": float(actor_n),
        "split/critic_pool_gpus": float(critic_n),
    }
    data["timing_s/step"] = a["gen"] + prep_wall + update_wall + FIXED_S
    return data


def write_run(path: Path, steps: list[dict[str, float]], validation: bool = True) -> Path:
    """A metrics file as verl's file logger writes it; step 1 slower, then +-JITTER; a validation record."""
    lines = []
    if validation:
        lines.append({"step": 0, "data": {"val-core/acc": 0.1}})
    for i, data in enumerate(steps, start=1):
        lines.append({"step": i, "data": data})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def run_file(path: Path, profile: Profile, steps: int = 5, actor_n: int = 0, critic_n: int = 0, n: int = 0) -> Path:
    """A stock run on ``n`` GPUs, or a split run on ``actor_n`` + ``critic_n`` GPUs."""
    records = []
    for i in range(1, steps + 1):
        scale = 1.0 + (JITTER if i % 2 == 0 else -JITTER)
        data = stock_step(profile, n, scale) if n else split_step(profile, actor_n, critic_n, scale)
        if i == 1:
            data = {**data, "timing_s/gen": data["timing_s/gen"] + FIRST_STEP_EXTRA_S}
            data["timing_s/step"] += FIRST_STEP_EXTRA_S
        records.append(data)
    return write_run(path, records)
