"""Where an overlapped phase spends its wall time: driver-side lanes against the workers' own intervals.

Used by ``whole_step.py``. Two sources per split-placement run, both on ``time.monotonic()``:

- the driver's lanes, from verl-split's ``VERL_SPLIT_TRACE`` timeline (written by the trainer process):
  ``critic update`` / ``actor update`` (from entering the step's critic update / from the actor's
  launch, to each result in the trainer's hands) and ``old_log_prob + ref`` / ``values``;
- the workers' calls, from ``tests/support/plugins/phase_log.py`` (``PHASE_LOG``): start, end and the CPU time
  the worker's thread got.

Per step and lane: **launch** (phase start to the lane's start: for the actor's update, the critic's
dispatch), **dispatch** (lane start to the first worker call's start: serialising and sending the
request), **compute** (the worker calls' own wall time: the thread's CPU time, its wait for a core, and
its wait on anything else), **between** (driver work between two calls of one lane:
old_log_prob's result handling before ref), **collection** (last worker end to the result in the
trainer's hands). The phase **wall** is first lane start to last lane end (``split/update_wall_s``,
``split/prep_wall_s``); the **join** is what the trainer's thread spends after that: its own calls'
timers (``timing_s/*``) minus the wall.

Against the sequential run of the same repetition (paired by step), the overlap's loss over the ideal
wall (the longer sequential lane) splits exactly into: the last lane's launch, its change in dispatch,
compute, between and collection, and the lane mismatch (the last lane's sequential time minus the
longer sequential lane, zero or negative). Means over steps, so that the parts add up.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

#: Per phase: its lanes as the timeline names them, and the verl timers of the trainer's calls.
PHASES = {
    "updates": {
        "lanes": {"critic": "critic update", "actor": "actor update"},
        "worker_phase": "update",
        "timers": ("update_critic", "update_actor"),
    },
    "prep": {
        "lanes": {"actor": "old_log_prob + ref", "critic": "values"},
        "worker_phase": "prep",
        "timers": ("old_log_prob", "ref", "values"),
    },
}
PARTS = ("launch", "dispatch", "compute", "between", "collection")
#: What a worker call's wall time is made of: CPU time, waiting for a core, waiting for anything else.
WAITS = ("cpu", "run_wait", "other_wait")
_EVENT = re.compile(r"^(?P<lane>.+) \(step (?P<step>\d+)\)$")


def driver_lanes(timeline: Path) -> dict[int, dict[str, tuple[float, float]]]:
    """Per step, each lane's (start, end) in seconds, from the Chrome-trace timeline."""
    events = json.loads(timeline.read_text())["traceEvents"]
    lanes: dict[int, dict[str, tuple[float, float]]] = defaultdict(dict)
    for event in events:
        match = _EVENT.match(event.get("name", "")) if event.get("ph") == "X" else None
        if match:
            start = event["ts"] / 1e6
            lanes[int(match["step"])][match["lane"]] = (start, start + event["dur"] / 1e6)
    return dict(lanes)


def worker_calls(log: Path) -> list[dict]:
    """The calls phase_log.py recorded, without calls nested in another call of the same process."""
    calls = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []

    def nested(c: dict) -> bool:
        return any(
            o is not c
            and o["pid"] == c["pid"]
            and o["mono_start"] <= c["mono_start"]
            and c["mono_end"] <= o["mono_end"]
            for o in calls
        )

    return [c for c in calls if not nested(c)]


def lane_parts(lane: tuple[float, float], calls: Sequence[dict], phase_start: float) -> dict[str, float] | None:
    """One lane of one step split into its parts (seconds), or None if no worker call falls in it."""
    start, end = lane
    inside = sorted((c for c in calls if start - 1e-3 <= c["mono_start"] <= end), key=lambda c: c["mono_start"])
    if not inside:
        return None
    compute = sum(c["mono_end"] - c["mono_start"] for c in inside)
    cpu = sum(c["thread_cpu_s"] for c in inside)
    waits = [c.get("run_wait_s") for c in inside]
    run_wait = sum(waits) if None not in waits else float("nan")
    dispatch = inside[0]["mono_start"] - start
    collection = end - max(c["mono_end"] for c in inside)
    return {
        "launch": start - phase_start,
        "dispatch": dispatch,
        "compute": compute,
        "between": (end - start) - dispatch - compute - collection,
        "collection": collection,
        "lane": end - start,
        "cpu": cpu,
        "run_wait": run_wait,
        "other_wait": compute - cpu - run_wait,
    }


def run_breakdown(out: Path, metrics: Sequence[dict], phase: str, steps: Sequence[int]) -> dict[int, dict]:
    """Per step: each lane's parts, the phase wall and the join; for the run whose files are in ``out``."""
    spec = PHASES[phase]
    lanes_by_step = driver_lanes(out / "timeline.json") if (out / "timeline.json").exists() else {}
    calls = [c for c in worker_calls(out / "phase_log.jsonl") if c["phase"] == spec["worker_phase"]]
    timers = {int(m["step"]): m for m in metrics}
    result = {}
    for step in steps:
        lanes = {name: span for name, span in lanes_by_step.get(step, {}).items() if name in spec["lanes"].values()}
        if len(lanes) != len(spec["lanes"]) or step not in timers:
            continue
        phase_start = min(s for s, _ in lanes.values())
        wall = max(e for _, e in lanes.values()) - phase_start
        row: dict = {"wall": wall, "lanes": {}}
        for role, name in spec["lanes"].items():
            parts = lane_parts(lanes[name], [c for c in calls if c["role"] == role], phase_start)
            if parts is None:
                break
            row["lanes"][role] = parts
        else:
            trainer_s = sum(float(timers[step].get(f"timing_s/{t}", 0.0)) for t in spec["timers"])
            row["join"] = trainer_s - wall
            result[step] = row
    return result


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def compare(sequential: Sequence[dict[int, dict]], overlapped: Sequence[dict[int, dict]]) -> dict | None:
    """Means over the steps both runs of a repetition have (one dict per repetition in each list)."""
    pairs = [(s[n], o[n]) for s, o in zip(sequential, overlapped, strict=True) for n in sorted(set(s) & set(o))]
    if not pairs:
        return None
    roles = list(pairs[0][0]["lanes"])
    summary: dict = {"steps": len(pairs), "runs": {}}
    for label, index in (("sequential", 0), ("overlapped", 1)):
        rows = [pair[index] for pair in pairs]
        summary["runs"][label] = {
            "wall": _mean([r["wall"] for r in rows]),
            "join": _mean([r["join"] for r in rows]),
            "lanes": {
                role: {k: _mean([r["lanes"][role][k] for r in rows]) for k in (*PARTS, "lane", *WAITS)}
                for role in roles
            },
        }
    loss = defaultdict(list)
    for seq, ovl in pairs:
        ideal = max(seq["lanes"][r]["lane"] for r in roles)
        last = max(roles, key=lambda r: ovl["lanes"][r]["launch"] + ovl["lanes"][r]["lane"])
        loss["ideal"].append(ideal)
        loss["wall"].append(ovl["wall"])
        loss["last_" + last].append(1.0)
        loss["launch"].append(ovl["lanes"][last]["launch"])
        for part in PARTS[1:]:
            loss[part].append(ovl["lanes"][last][part] - seq["lanes"][last][part])
        loss["mismatch"].append(seq["lanes"][last]["lane"] - ideal)
    summary["loss"] = {k: sum(v) / len(pairs) if k.startswith("last_") else _mean(v) for k, v in loss.items()}
    return summary


def table(title: str, summary: dict, ceiling: float | None) -> str:
    """The console table of :func:`compare`'s summary: ms unless marked."""
    runs, roles = summary["runs"], list(summary["runs"]["sequential"]["lanes"])
    head = f"{'':<38}" + "".join(f"{label + ' ' + role:>20}" for label in runs for role in roles)
    lines = [f"{title} (mean of {summary['steps']} steps; ms unless marked)", head, "-" * len(head)]
    rows = [
        ("launch (phase start -> lane start)", "launch", 1e3, "8.1f"),
        ("dispatch (lane start -> worker start)", "dispatch", 1e3, "8.1f"),
        ("worker compute, s", "compute", 1, "8.3f"),
        ("  on a core (thread CPU time), s", "cpu", 1, "8.3f"),
        ("  ready, waiting for a core, s", "run_wait", 1, "8.3f"),
        ("  waiting on others (Ray, data), s", "other_wait", 1, "8.3f"),
        ("between calls (driver work)", "between", 1e3, "8.1f"),
        ("collection (worker end -> driver)", "collection", 1e3, "8.1f"),
        ("lane, driver-side, s", "lane", 1, "8.3f"),
    ]
    for label, key, scale, fmt in rows:
        cells = [runs[r]["lanes"][role][key] * scale for r in runs for role in roles]
        lines.append(f"{label:<38}" + "".join(f"{format(c, fmt):>20}" for c in cells))
    for label, key in (("phase wall, s", "wall"), ("join (wall end -> trainer's call returns)", "join")):
        scale, fmt = (1, "8.3f") if key == "wall" else (1e3, "8.1f")
        cells = [format(runs[r][key] * scale, fmt) for r in runs]
        lines.append(f"{label:<38}" + "".join(f"{c:>40}" for c in cells))
    loss = summary["loss"]
    efficiency = loss["ideal"] / loss["wall"]
    lost_ms = (loss["wall"] - loss["ideal"]) * 1e3
    last = ", ".join(f"{role} {loss.get('last_' + role, 0.0):.0%}" for role in roles)
    parts = ", ".join(
        f"{name} {loss[key] * 1e3:+.0f}"
        for name, key in (
            ("launch", "launch"),
            ("dispatch", "dispatch"),
            ("compute", "compute"),
            ("between", "between"),
            ("collection", "collection"),
            ("lane mismatch", "mismatch"),
        )
    )
    lines.append(
        f"efficiency {efficiency:.2f} = ideal {loss['ideal']:.3f} s / wall {loss['wall']:.3f} s: "
        f"{lost_ms:.0f} ms lost, in the lane that ended last ({last} of steps): {parts} ms"
    )
    seq_lanes, ovl_lanes = runs["sequential"]["lanes"], runs["overlapped"]["lanes"]
    slowdown = ", ".join(
        f"{role} {ovl_lanes[role]['compute'] / seq_lanes[role]['compute'] - 1:+.0%} ("
        + ", ".join(
            f"{name} {(ovl_lanes[role][key] - seq_lanes[role][key]) * 1e3:+.0f} ms"
            for name, key in (("CPU", "cpu"), ("waiting for a core", "run_wait"), ("waiting on others", "other_wait"))
        )
        + ")"
        for role in roles
    )
    line = f"worker compute slowed by running at once: {slowdown}"
    if ceiling:
        line += f"; two bare processes: {1 / ceiling - 1:+.0%} (ceiling {ceiling:.2f})"
    lines.append(line)
    return "\n".join(lines)
