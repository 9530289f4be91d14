"""Summaries of a run, from the per-step metrics verl's tracker recorded.

Used by ``verl-split demo`` and the benchmarks: the whole step broken into phases
(:func:`phase_times`), a per-step table of the update phase for the console and a PNG plot
of the per-step update times with and without overlap.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

#: The phases of one PPO step, in the order they run; see :func:`phase_times`.
PHASES = ("gen", "reward", "prep", "adv", "updates", "other")


def phase_times(step: dict[str, Any]) -> dict[str, float]:
    """One step's wall time per phase, from verl's ``timing_s/*`` and verl-split's ``split/*``.

    ``prep`` is old_log_prob + ref + values, ``updates`` the critic and actor updates. Where the
    two lanes of a phase may have overlapped (split placement), verl's own timers measure the
    trainer's *wait*, not the work, so the phase's wall time comes from verl-split's metrics
    (``split/prep_wall_s``, ``split/update_wall_s``); in a stock run, from verl's timers.
    ``other`` is the rest of ``timing_s/step`` (balancing, weight sync, checkpoints).
    """

    def timing(name: str) -> float:
        return float(step.get(f"timing_s/{name}", 0.0))

    phases = {"gen": timing("gen"), "reward": timing("reward"), "adv": timing("adv")}
    if "split/prep_wall_s" in step:
        phases["prep"] = float(step["split/prep_wall_s"])
    else:
        phases["prep"] = timing("old_log_prob") + timing("ref") + timing("values")
    if "split/update_wall_s" in step:
        phases["updates"] = float(step["split/update_wall_s"])
    elif "split/critic_update_s" in step:  # critic warm-up: no actor update
        phases["updates"] = float(step["split/critic_update_s"])
    else:
        phases["updates"] = timing("update_critic") + timing("update_actor")
    total = timing("step")
    phases["other"] = max(total - sum(phases.values()), 0.0)
    phases["step"] = total
    return {name: phases[name] for name in (*PHASES, "step")}


def step_rows(metrics: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """One row per step that logged verl-split's update metrics."""
    rows = []
    for step in metrics:
        if "split/critic_update_s" not in step:
            continue
        t_actor = float(step.get("split/actor_update_s", 0.0))
        t_critic = float(step["split/critic_update_s"])
        rows.append(
            {
                "step": int(step["step"]),
                "t_actor_s": t_actor,
                "t_critic_s": t_critic,
                "wall_s": float(step.get("split/update_wall_s", t_critic)),
                "overlap_s": float(step.get("split/overlap_s", 0.0)),
                "speedup": float(step.get("split/speedup", 1.0)),
                "ideal_speedup": float(step.get("split/ideal_speedup", 1.0)),
                "overlapped": float(step.get("split/overlapped", 0.0)),
            }
        )
    return rows


def summary_table(rows: Sequence[dict[str, float]], sequential: Sequence[dict[str, float]] = ()) -> str:
    """The console summary: each update's time, the wall time, achieved and ideal speed-up."""
    seq_wall = {row["step"]: row["wall_s"] for row in sequential}
    header = (
        f"{'step':>4} | {'actor':>7} | {'critic':>7} | {'wall':>7} | {'overlap':>7} | {'speed-up':>8} | {'ideal':>6}"
    )
    if seq_wall:
        header += f" | {'wall w/o overlap':>16}"
    lines = [header, "-" * len(header)]
    for row in rows:
        line = (
            f"{row['step']:>4} | {row['t_actor_s']:6.2f}s | {row['t_critic_s']:6.2f}s | {row['wall_s']:6.2f}s "
            f"| {row['overlap_s']:6.2f}s | {row['speedup']:7.2f}x | {row['ideal_speedup']:5.2f}x"
        )
        if seq_wall:
            wall = seq_wall.get(row["step"])
            line += f" | {wall:15.2f}s" if wall is not None else f" | {'-':>16}"
        lines.append(line)
    return "\n".join(lines)


def plot_update_times(
    rows: Sequence[dict[str, float]], sequential: Sequence[dict[str, float]], path: str | os.PathLike[str]
) -> None:
    """A PNG: per step, each update's time and the update phase's wall time with and without overlap."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    steps = [row["step"] for row in rows]
    seq_by_step = {row["step"]: row for row in sequential}
    width = 0.2
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = [
        ("actor update", [r["t_actor_s"] for r in rows], "#d62728"),
        ("critic update", [r["t_critic_s"] for r in rows], "#e377c2"),
        ("wall, overlapped", [r["wall_s"] for r in rows], "#1f77b4"),
    ]
    if seq_by_step:
        series.append(
            ("wall, one after the other", [seq_by_step.get(s, {}).get("wall_s", 0.0) for s in steps], "#7f7f7f")
        )
    for i, (label, values, color) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar([s + offset for s in steps], values, width, label=label, color=color)
    ax.set_xlabel("PPO step")
    ax.set_ylabel("seconds")
    ax.set_xticks(steps)
    ax.set_title("verl-split: update phase per step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
