"""Summaries of a run, from the per-step metrics verl's tracker recorded.

Used by ``verl-split demo`` and the benchmarks: the whole step broken into phases
(:func:`phase_times`), a console table of the phases of several runs side by side, a per-step
table of the update phase for the console (with shared rollout's columns when the run logged
them) and a line on the deferred critic update. The PNG plots are in :mod:`verl_split.dryrun.plots`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from verl_split.core import metric_names as names

#: The phases of one PPO step, in the order they run; see :func:`phase_times`.
PHASES = ("gen", "reward", "prep", "adv", "updates", "other")

#: What each phase is, for the legend under the phase table.
PHASE_MEANINGS = {
    "gen": "generation",
    "reward": "reward model",
    "prep": "old_log_prob + ref + values",
    "adv": "advantages",
    "updates": "critic + actor updates",
    "other": "weight sync, checkpoints and the rest of the step",
}

#: One colour per phase in :func:`plot_step_times` (matplotlib's tab10, in phase order).
PHASE_COLORS = {
    "gen": "#1f77b4",
    "reward": "#bcbd22",
    "prep": "#2ca02c",
    "adv": "#9467bd",
    "updates": "#d62728",
    "other": "#7f7f7f",
}


def phase_times(step: dict[str, Any]) -> dict[str, float]:
    """One step's wall time per phase, from verl's ``timing_s/*`` and verl-split's ``split/*``.

    ``prep`` is old_log_prob + ref + values, ``updates`` the critic and actor updates. Where the
    two lanes of a phase may have overlapped (split placement), verl's own timers measure the
    trainer's *wait*, not the work, so the phase's wall time comes from verl-split's metrics
    (``split/prep_wall_s``, ``split/update_wall_s``); in a stock run, from verl's timers. When the critic's
    update was deferred into the next step (``split/critic_update_deferred``), ``updates`` is what the step
    waited for (verl's timers: the critic's dispatch and the actor's update) and the wait at the join is in
    the next step's ``prep``. ``other`` is the rest of ``timing_s/step`` (balancing, weight sync, checkpoints).
    """

    def timing(name: str) -> float:
        return float(step.get(f"timing_s/{name}", 0.0))

    phases = {"gen": timing("gen"), "reward": timing("reward"), "adv": timing("adv")}
    if names.PREP_WALL_S in step:
        phases["prep"] = float(step[names.PREP_WALL_S])
    else:
        phases["prep"] = timing("old_log_prob") + timing("ref") + timing("values")
    if step.get(names.CRITIC_UPDATE_DEFERRED):
        # The critic's update ran on into the next step: split/update_wall_s spans it, but the step waited only
        # for the critic's dispatch and the actor's update, which is what verl's own timers measured.
        phases["updates"] = timing("update_critic") + timing("update_actor")
    elif names.UPDATE_WALL_S in step:
        phases["updates"] = float(step[names.UPDATE_WALL_S])
    elif names.CRITIC_UPDATE_S in step:  # critic warm-up: no actor update
        phases["updates"] = float(step[names.CRITIC_UPDATE_S])
    else:
        phases["updates"] = timing("update_critic") + timing("update_actor")
    total = timing("step")
    phases["other"] = max(total - sum(phases.values()), 0.0)
    phases["step"] = total
    return {name: phases[name] for name in (*PHASES, "step")}


#: One run in a comparison: its title and its per-step metrics (verl's keys, ``step`` included).
Column = tuple[str, Sequence[dict[str, Any]]]

#: A phase below this in every run is one the job does not have: verl times an empty block
#: (``timing_s/reward`` without a reward model is a few microseconds).
MIN_PHASE_S = 5e-4


def steady_steps(metrics: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps a run's means are taken over: all but the first, which pays one-off costs (start-up,
    the first allocations, the rollout's warm-up), or the first alone if it is the only one."""
    ordered = sorted(metrics, key=lambda m: int(m["step"]))
    return ordered[1:] or ordered


def mean_phases(metrics: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """The mean of :func:`phase_times` over :func:`steady_steps`; None for a run without steps."""
    steps = steady_steps(metrics)
    if not steps:
        return None
    times = [phase_times(step) for step in steps]
    return {name: sum(t[name] for t in times) / len(times) for name in (*PHASES, "step")}


def _mean_of(metrics: Sequence[dict[str, Any]]) -> str:
    numbers = [int(m["step"]) for m in steady_steps(metrics)]
    if not numbers:
        return "no steps"
    if len(metrics) == 1:
        return f"step {numbers[0]}, the only one (it pays one-off start-up costs)"
    span = f"step {numbers[0]}" if len(numbers) == 1 else f"steps {numbers[0]}-{numbers[-1]}"
    return f"mean of {span} (step {int(min(m['step'] for m in metrics))} pays one-off start-up costs)"


def phase_table(columns: Sequence[Column]) -> str:
    """The console table: mean wall time per phase of each run side by side, the whole step last; then the
    last run's speed-up of the whole step against each other run, and what the phases are."""
    means = [mean_phases(metrics) for _, metrics in columns]
    shown = [p for p in PHASES if any(m is not None and m[p] >= MIN_PHASE_S for m in means)]
    titles = [title for title, _ in columns]
    widths = [max(len(title), 8) for title in titles]
    header = "phase   | " + " | ".join(f"{t:>{w}}" for t, w in zip(titles, widths, strict=True))
    rule = "-" * len(header)
    lines = [f"wall time per phase, {_mean_of(columns[0][1] if columns else [])}:", header, rule]
    for phase in (*shown, "step"):
        if phase == "step":
            lines.append(rule)
        cells = ["-" if m is None else f"{m[phase]:.2f}s" for m in means]
        lines.append(f"{phase:<7} | " + " | ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    last = means[-1] if means else None
    if len(columns) > 1 and last is not None and last["step"] > 0:
        against = [
            f"{m['step'] / last['step']:.2f}x against {title}"
            for title, m in zip(titles[:-1], means[:-1], strict=True)
            if m is not None
        ]
        lines.append(f"speed-up of the whole step, {titles[-1]}: {', '.join(against)}")
    lines += floor_lines(columns)
    meanings = [f"{p} = {PHASE_MEANINGS[p]}" for p in shown]
    lines += textwrap.wrap("; ".join(meanings), width=max(len(header), 100))
    return "\n".join(lines)


def floor_lines(columns: Sequence[Column]) -> list[str]:
    """Per run that logged it (shared rollout on verl 0.9.1), generation's floor beside its gen: the mean over the
    steady steps of ``split/generation_floor_s`` and of the distance to it (``runtime/shared_rollout/floor.py``)."""
    lines = []
    for title, metrics in columns:
        steps = [m for m in steady_steps(metrics) if m.get(names.GENERATION_FLOOR_S) is not None]
        if steps:
            floor = sum(float(m[names.GENERATION_FLOOR_S]) for m in steps) / len(steps)
            over = sum(float(m.get(names.GENERATION_OVER_FLOOR, 0.0)) for m in steps) / len(steps)
            lines.append(f"gen floor, {title}: {floor:.2f}s, generation {over:+.0%} over it (split/generation_*)")
    return lines


def step_rows(metrics: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """One row per step that logged verl-split's update metrics.

    ``wall_s`` is the update phase as the step paid it (:func:`phase_times`): with the critic's update
    deferred into the next step, the critic's dispatch and the actor's update; ``hidden_s`` is then the part
    of the critic's update that ran behind the next step's work, ``waited_s`` what its join waited for."""
    rows = []
    for step in metrics:
        if names.CRITIC_UPDATE_S not in step:
            continue
        t_actor = float(step.get(names.ACTOR_UPDATE_S, 0.0))
        t_critic = float(step[names.CRITIC_UPDATE_S])
        wall = phase_times(step)["updates"] or float(step.get(names.UPDATE_WALL_S, t_critic))
        rows.append(
            {
                "step": int(step["step"]),
                "t_actor_s": t_actor,
                "t_critic_s": t_critic,
                "wall_s": wall,
                "overlap_s": float(step.get(names.OVERLAP_S, 0.0)),
                "speedup": (t_actor + t_critic) / wall if wall > 0 else float(step.get(names.SPEEDUP, 1.0)),
                "ideal_speedup": float(step.get(names.IDEAL_SPEEDUP, 1.0)),
                "overlapped": float(step.get(names.OVERLAPPED, 0.0)),
                "deferred": float(step.get(names.CRITIC_UPDATE_DEFERRED, 0.0)),
                "hidden_s": float(step.get(names.CRITIC_UPDATE_HIDDEN_S, 0.0)),
                "waited_s": float(step.get(names.CRITIC_JOIN_WAIT_S, 0.0)),
                **_shared_rollout(step),
            }
        )
    return rows


def _shared_rollout(step: dict[str, Any]) -> dict[str, float]:
    """Shared rollout's metrics of a step, only those it logged: the share of requests the critic pool
    generated, whether and when it joined (seconds after the first request), what it saved, its push."""
    keys = {
        "share": names.CRITIC_POOL_ROLLOUT_SHARE,
        "joined": names.CRITIC_POOL_JOINED,
        "join_s": names.CRITIC_POOL_JOIN_S,
        "saved_s": names.SHARED_ROLLOUT_SAVED_ESTIMATE_S,
        "push_s": names.SHARED_ROLLOUT_SYNC_S,
    }
    return {key: float(step[name]) for key, name in keys.items() if step.get(name) is not None}


def summary_table(rows: Sequence[dict[str, float]], sequential: Sequence[dict[str, float]] = ()) -> str:
    """The console summary: each update's time, the wall time, achieved and ideal speed-up; with the critic's
    update deferred, how much of it hid behind the next step and how long its join waited."""
    seq_wall = {row["step"]: row["wall_s"] for row in sequential}
    deferred = any(row.get("deferred") for row in rows)
    shared = any("share" in row for row in rows)
    header = (
        f"{'step':>4} | {'actor':>7} | {'critic':>7} | {'wall':>7} | {'overlap':>7} | {'speed-up':>8} | {'ideal':>6}"
    )
    if deferred:
        header += f" | {'hidden':>7} | {'waited':>7}"
    if shared:
        header += f" | {'critic pool gen':>15} | {'joined at':>9} | {'saved':>7}"
    if seq_wall:
        header += f" | {'wall w/o overlap':>16}"
    lines = [header, "-" * len(header)]
    for row in rows:
        line = (
            f"{row['step']:>4} | {row['t_actor_s']:6.2f}s | {row['t_critic_s']:6.2f}s | {row['wall_s']:6.2f}s "
            f"| {row['overlap_s']:6.2f}s | {row['speedup']:7.2f}x | {row['ideal_speedup']:5.2f}x"
        )
        if deferred:
            if row.get("deferred"):
                line += f" | {row['hidden_s']:6.2f}s | {row['waited_s']:6.2f}s"
            else:
                line += f" | {'-':>7} | {'-':>7}"
        if shared:
            line += _shared_cells(row)
        if seq_wall:
            wall = seq_wall.get(row["step"])
            line += f" | {wall:15.2f}s" if wall is not None else f" | {'-':>16}"
        lines.append(line)
    if deferred:
        lines.append(
            "wall = the update phase the step waited for: with the critic's update deferred into the next step, its "
            "dispatch and the actor's update; hidden = the part of the critic's update behind the next step's work, "
            "waited = what the join (the next values) waited for"
        )
    if shared:
        lines.append(
            "shared rollout: critic pool gen = the step's requests its replicas generated; joined at = seconds "
            "after the step's first request when the critic pool opened (0: from the start; - : it never joined, "
            "the critic's update outlasted generation); saved = an estimate of the generation time it saved: its "
            "requests at the actor pool's rate"
        )
    return "\n".join(lines)


def _shared_cells(row: dict[str, float]) -> str:
    share = f"{100 * row['share']:.0f} %" if "share" in row else "-"
    joined = f"{row['join_s']:.2f}s" if "join_s" in row and row.get("joined") != 0.0 else "-"
    saved = f"{row['saved_s']:.2f}s" if "saved_s" in row else "-"
    return f" | {share:>15} | {joined:>9} | {saved:>7}"


def deferral_line(rows: Sequence[dict[str, float]]) -> str | None:
    """One line on the deferred critic update over the steps that deferred it: how much of the critic's update
    hid behind the next step, and how much the next values waited for; None if no step deferred it."""
    deferred = [row for row in rows if row.get("deferred")]
    if not deferred:
        return None
    n = len(deferred)
    span = f"step {deferred[0]['step']}" if n == 1 else f"steps {deferred[0]['step']}-{deferred[-1]['step']}"
    critic = sum(row["t_critic_s"] for row in deferred) / n
    actor = sum(row["t_actor_s"] for row in deferred) / n
    hidden = sum(row["hidden_s"] for row in deferred) / n
    waited = sum(row["waited_s"] for row in deferred) / n
    return (
        f"the critic's update deferred in {span}: of its {critic:.2f} s ({actor:.2f} s for the actor's), "
        f"{hidden:.2f} s ran behind the next step's weight sync and generation and the next values waited "
        f"{waited:.2f} s for the rest (means); the update phase cost the actor's update, not the critic's"
    )
