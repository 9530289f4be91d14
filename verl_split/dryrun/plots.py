"""The PNG plots of ``verl-split demo``: each step's phases per run, and the update phase per step.

Drawn with matplotlib's Agg backend (no display), from the per-step metrics and the rows of
:mod:`verl_split.dryrun.report`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from verl_split.dryrun.report import MIN_PHASE_S, PHASE_COLORS, PHASE_MEANINGS, PHASES, Column, phase_times

#: The y axis of the step plot reaches this much above the tallest step after the first; a first step
#: taller than that (start-up: seconds against sub-second steps on the CPU dry run) is clipped, its time
#: written on it, so that it does not flatten every later step.
HEADROOM = 1.3


def step_scale(totals_by_step: dict[int, list[float]]) -> float | None:
    """The y limit of the step plot: HEADROOM x the tallest later step, when the first step is taller than
    that; None (matplotlib's own scale) otherwise, or with a single step."""
    steps = sorted(totals_by_step)
    later = [t for step in steps[1:] for t in totals_by_step[step]]
    if not later:
        return None
    limit = HEADROOM * max(later)
    return limit if max(totals_by_step[steps[0]], default=0.0) > limit else None


def plot_step_times(columns: Sequence[Column], path: str | os.PathLike[str], note: str = "") -> bool:
    """A PNG: for each PPO step one bar per run, side by side, stacked by phase, the step's time on top.

    The first step's bars are clipped at the scale of the later steps (:func:`step_scale`) when start-up makes
    them taller, with their time written on them and a note under the title; True when they were. ``note``: a
    line under the title on what the figure is (the demo's: a tiny model on CPU)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    per_run = [{int(m["step"]): phase_times(m) for m in metrics} for _, metrics in columns]
    steps = sorted({step for run in per_run for step in run})
    shown = [p for p in PHASES if any(t[p] >= MIN_PHASE_S for run in per_run for t in run.values())]
    limit = step_scale({step: [run[step]["step"] for run in per_run if step in run] for step in steps})
    # One word per line under each bar: "split, overlaps off" is wider than its bar.
    labels = [title.replace(",", "").replace(" ", "\n") for title, _ in columns]
    label_lines = max((label.count("\n") + 1 for label in labels), default=1)
    slots = len(columns) + 1  # the runs of a step, then a gap before the next step
    fig, ax = plt.subplots(figsize=(min(4.5 + max(0.6 * slots * len(steps), 4.0), 24.0), 5.0))
    ticks, tick_labels = [], []
    for j, step in enumerate(steps):
        for i, label in enumerate(labels):
            x = j * slots + i
            ticks.append(x)
            tick_labels.append(label)
            times = per_run[i].get(step)
            if times is None:
                continue
            bottom = 0.0
            for phase in shown:
                ax.bar(x, times[phase], 0.8, bottom=bottom, color=PHASE_COLORS[phase])
                bottom += times[phase]
            if limit is not None and bottom > limit:  # clipped: the time on the bar, below the axis' top
                ax.text(
                    x,
                    limit * 0.97,
                    f"{times['step']:.1f}s\n(clipped)",
                    ha="center",
                    va="top",
                    fontsize=7,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.0},
                )
            else:
                ax.text(x, bottom, f"{times['step']:.1f}s", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(ticks)
    ax.set_xticklabels(tick_labels, fontsize=8)
    ax.set_xlim(-1, len(steps) * slots - 1)  # half a gap at either end, also when there is one bar
    # The step numbers on a second x axis, below the runs' labels.
    steps_axis = ax.secondary_xaxis("bottom")
    steps_axis.set_xticks([j * slots + (len(columns) - 1) / 2 for j in range(len(steps))])
    steps_axis.set_xticklabels([f"step {step}" for step in steps], fontweight="bold")
    steps_axis.tick_params(length=0, pad=8 + 10 * label_lines)
    ax.set_ylabel("seconds")
    title = "wall time of each PPO step, by phase, one bar per run"
    if note:
        title += f"\n{note}"
    if limit is not None:
        title += f"\nstep {steps[0]} (start-up) clipped at the later steps' scale, its time written on its bars"
        ax.set_ylim(0, limit)
    ax.set_title(title, fontsize=10 if limit is not None or note else 12)
    # Listed top to bottom as the bars are stacked, beside the plot so that no bar is hidden.
    handles = [Patch(color=PHASE_COLORS[p], label=f"{p}: {PHASE_MEANINGS[p]}") for p in reversed(shown)]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if limit is None:
        ax.margins(y=0.08)  # room for the times above the bars
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return limit is not None


def plot_update_times(
    rows: Sequence[dict[str, float]],
    sequential: Sequence[dict[str, float]],
    path: str | os.PathLike[str],
    run: str = "split, overlaps on",
    sequential_run: str = "split, overlaps off",
) -> None:
    """A PNG: per step, each update's time and the update phase's wall time in ``run`` (``rows``), and the update
    phase's wall in ``sequential_run`` (``sequential``), another run: each bar's label names the run it is from,
    since that run's wall can be shorter than one of this run's updates (here the critic's update shares the
    machine with the next step's work)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    steps = [row["step"] for row in rows]
    seq_by_step = {row["step"]: row for row in sequential}
    width = 0.2
    fig, ax = plt.subplots(figsize=(9, 6))
    deferred = any(row.get("deferred") for row in rows)
    waited = "update phase's wall: what the step waited for" + (
        " (a deferred critic update left out)" if deferred else ""
    )
    series = [
        (f"actor update, {run}", [r["t_actor_s"] for r in rows], "#d62728"),
        (f"critic update, {run}", [r["t_critic_s"] for r in rows], "#e377c2"),
        (f"{waited}, {run}", [r["wall_s"] for r in rows], "#1f77b4"),
    ]
    if seq_by_step:
        walls = [seq_by_step.get(s, {}).get("wall_s", 0.0) for s in steps]
        series.append(
            (f"update phase's wall, both updates one after the other, {sequential_run} (another run)", walls, "#7f7f7f")
        )
    for i, (label, values, color) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar([s + offset for s in steps], values, width, label=label, color=color)
    ax.set_xlabel("PPO step")
    ax.set_ylabel("seconds")
    ax.set_xticks(steps)
    title = f"update phase per step, from the run {run!r}"
    if seq_by_step:
        title += f"; grey: from the run {sequential_run!r}"
    ax.set_title(title, fontsize=10)
    # Under the axes: the labels are long, and inside they would hide the bars.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
