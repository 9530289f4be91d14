"""The bound's lanes: each the fastest measurement of its work anywhere in the run, and where it came from.

    .venv/bin/python benchmarks/whole_step_floor.py benchmarks/whole_step_pinned_v1_1to1.json

``split_bound.py`` turns seven lanes into the best split's step. A bound is only a bound if each lane is a floor
of its work on this machine, so each lane is the shortest time any run of the invocation (every configuration,
every repetition: each run's mean over its steady steps) measured for that same work, never one sample of one
run. What measures what (``measurements``):

- ``gen_one`` (the actor pool generating the whole batch alone): ``gen`` of every split run without shared
  rollout; ``gen_two`` (two replicas, one a pool): ``gen`` of stock and of the shared-rollout runs (where the
  critic pool joins late, a longer measurement of the same work, so a floor only where it is the shortest);
- ``prep_actor``, ``prep_critic``, ``update_actor``, ``update_critic`` (each lane on one worker): verl-split's
  lane metrics (``split/prep_actor_s`` ...) of every split run, verl's timers where the preparation runs one
  after the other, and the phase's wall where two lanes overlap (each lane ends within it; where the critic's
  update is deferred the update phase's wall holds the actor's update only);
- ``serial``: reward + advantages + the rest of the step, the driver's own work, in every run.

Run as a script on a JSON ``whole_step.py`` wrote, it rebuilds the bound from what that JSON kept (each
configuration's fastest repetition per phase, split sequential's lanes per repetition: fewer measurements
than the live run had, so the same or a higher bound), prints each lane with its source and a FINDING line
for each configuration whose median step is shorter than the bound's step, and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import split_bound
from whole_step_compare import FORMER_NAMES

#: The phases no pool runs: the bound's serial part.
SERIAL_PHASES = ("reward", "adv", "other")
#: Each one-worker lane's metric (verl-split's), and verl's timers where the phase runs one lane after the other.
LANE_METRICS = {
    "prep_actor": ("split/prep_actor_s", ("timing_s/old_log_prob", "timing_s/ref")),
    "prep_critic": ("split/prep_critic_s", ("timing_s/values",)),
    "update_actor": ("split/actor_update_s", ()),
    "update_critic": ("split/critic_update_s", ()),
}


@dataclass(frozen=True)
class RunKind:
    """What a configuration's run does, as far as which of its times measure which lane."""

    split: bool  # False: stock (two workers in one pool)
    shared: bool = False  # the critic pool generates too
    updates_overlapped: bool = False
    prep_overlapped: bool = False
    deferred: bool = False  # the critic's update runs on into the next step
    #: Values streamed into generation's tail: the values left after generation, not the values' work.
    streamed: bool = False

    @property
    def one_lane_at_a_time(self) -> bool:
        """Split sequential: every phase alone, nothing beside it."""
        return self.split and not (self.shared or self.updates_overlapped or self.prep_overlapped or self.deferred)

    @classmethod
    def of(cls, split: str | None, overlap: str | None, shared: bool, streamed: bool = False) -> RunKind:
        """From ``whole_step.CONFIGS``' ``VERL_SPLIT`` and ``VERL_SPLIT_OVERLAP`` (``on``: every overlap)."""
        phases = {"updates", "prep", "defer"} if overlap == "on" else set((overlap or "off").split(","))
        return cls(bool(split), shared, "updates" in phases, "prep" in phases, "defer" in phases, streamed)


@dataclass(frozen=True)
class Measurement:
    """One run's time for one lane's work; ``repetition`` None: the fastest of the repetitions, which one unsaid."""

    lane: str  # a field of split_bound.Lanes
    seconds: float
    config: str  # the configuration's title
    repetition: int | None
    measure: str  # what was read: a metric, a timer or a phase's wall


def measurements(
    kind: RunKind,
    config: str,
    repetition: int | None,
    phases: Mapping[str, float],
    lanes: Mapping[str, tuple[float, str]] | None = None,
) -> list[Measurement]:
    """What one run measured of each lane: its phase means and, where known, its one-worker lanes (``lanes``:
    Lanes field -> (seconds, what was read: ``LANE_METRICS``' metric, or verl's timers where the run prepares
    one lane at a time))."""

    def m(lane: str, seconds: float, measure: str) -> Measurement:
        return Measurement(lane, seconds, config, repetition, measure)

    gen = "gen_two" if not kind.split or kind.shared else "gen_one"
    found = [m(gen, phases["gen"], "gen phase"), m("serial", sum(phases[p] for p in SERIAL_PHASES), "reward+adv+other")]
    if not kind.split:  # stock's other phases run each lane on two workers: not the one-worker work
        return found
    found += [m(lane, seconds, measure) for lane, (seconds, measure) in (lanes or {}).items()]
    if kind.prep_overlapped:
        found += [m(lane, phases["prep"], "prep phase wall") for lane in ("prep_actor", "prep_critic")]
    if kind.updates_overlapped:
        both = ("update_actor",) if kind.deferred else ("update_actor", "update_critic")
        found += [m(lane, phases["updates"], "updates phase wall") for lane in both]
    if kind.streamed:  # part of the values ran inside generation: what is left after it is no floor of the values
        found = [item for item in found if item.lane != "prep_critic"]
    # A phase a run did not time reads 0 s: no measurement of its lanes (the driver's own time may be that short).
    return [item for item in found if item.seconds > 0.0 or item.lane == "serial"]


def floor_lanes(found: Iterable[Measurement]) -> tuple[split_bound.Lanes, dict[str, Measurement]]:
    """Each lane's fastest measurement, and that measurement (its source)."""
    best: dict[str, Measurement] = {}
    for item in found:
        if item.lane not in best or item.seconds < best[item.lane].seconds:
            best[item.lane] = item
    missing = [f.name for f in fields(split_bound.Lanes) if f.name not in best]
    if missing:
        raise ValueError(f"no run measured {', '.join(missing)}: the bound needs stock and split sequential")
    ordered = {f.name: best[f.name] for f in fields(split_bound.Lanes)}
    return split_bound.Lanes(**{lane: m.seconds for lane, m in ordered.items()}), ordered


def source_of(item: Measurement) -> dict:
    """A lane's source, as the JSON keeps it."""
    return {k: v for k, v in asdict(item).items() if k != "lane"}


def source_text(item: Measurement) -> str:
    rep = "its fastest repetition" if item.repetition is None else f"repetition {item.repetition}"
    return f"{item.seconds:.2f} s ({item.config}, {rep}, {item.measure})"


def lane_lines(sources: Mapping[str, Mapping]) -> list[str]:
    """One line per lane with its source (``sources``: lane -> ``source_of``'s dict)."""
    return [f"  {lane:<14}{source_text(Measurement(lane, **s))}" for lane, s in sources.items()]


def findings(steps: Mapping[str, Mapping[str, float]], bound_step_s: float) -> list[str]:
    """A FINDING line for each configuration whose median step (``steps``: title -> its step's stats) is shorter
    than the bound's: a split beating the best split means a lane or the model misses something."""
    return [
        f"FINDING: {config}'s median step {s['median']:.2f} s is shorter than the bound's {bound_step_s:.2f} s "
        f"({bound_step_s / s['median']:.2f} of the bound): the model misses what this configuration gains"
        for config, s in steps.items()
        if s["median"] < bound_step_s
    ]


def current_names(rows: list[dict]) -> list[dict]:
    """The rows with today's configuration names (a JSON recorded before 2026-11-29 says ``split + all``), each a
    copy: the caller's rows stay as they were."""
    renamed = []
    for row in rows:
        row = dict(row, config=FORMER_NAMES.get(row["config"], row["config"])) if "config" in row else dict(row)
        if "lanes" in row:
            row["lanes"] = {
                lane: dict(source, config=FORMER_NAMES.get(source["config"], source["config"]))
                for lane, source in row["lanes"].items()
            }
        renamed.append(row)
    return renamed


def from_rows(rows: list[dict], kinds: Mapping[str, RunKind]) -> list[Measurement]:
    """What a ``whole_step.py`` JSON kept: each configuration's fastest repetition per phase (``phases_s`` min),
    and split sequential's one-worker lanes per repetition (the bound row's, or the phase rows')."""
    rows = current_names(rows)
    found = []
    for row in (r for r in rows if r.get("kind") == "step" and r["config"] in kinds):
        fastest = {phase: s["min"] for phase, s in row["phases_s"].items()}
        found += measurements(kinds[row["config"]], row["config"], None, fastest)
    bound = next((r for r in rows if r.get("kind") == "bound"), None) or {}
    # Since issue 52 the bound row names each lane's source: the live run's floor, kept whole.
    found += [Measurement(lane, **source) for lane, source in bound.get("lanes", {}).items()]
    # Before, each repetition's lanes were split sequential's (its lane metrics, one run each).
    sequential = next(title for title, kind in kinds.items() if kind.one_lane_at_a_time)
    for i, rep in enumerate(bound.get("per_repetition", []), start=1):
        lanes = rep.get("lanes", {})
        found += [
            Measurement(lane, lanes[lane], sequential, i, LANE_METRICS[lane][0])
            for lane in LANE_METRICS
            if lane in lanes
        ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="a JSON whole_step.py wrote")
    args = parser.parse_args(argv)
    import whole_step  # the configurations' titles and kinds; imported here, as whole_step imports this module

    rows = current_names(json.loads(args.json.read_text()))
    kinds = {whole_step.TITLES[key]: kind for key, kind in whole_step.RUN_KINDS.items()}
    lanes, best = floor_lanes(from_rows(rows, kinds))
    split = split_bound.best_split(lanes)
    steps = {r["config"]: r["phases_s"]["step"] for r in rows if r.get("kind") == "step"}
    stock = steps.get(whole_step.TITLES["stock"])
    print(f"{args.json}: the bound's lanes, each its fastest measurement in what the JSON kept:")
    print("\n".join(lane_lines({lane: source_of(m) for lane, m in best.items()})))
    against = f", {stock['median'] / split.step_s:.2f}x stock's median step" if stock else ""
    print(f"the best split: {split.step_s:.2f} s a step{against}")
    found = findings({c: s for c, s in steps.items() if c != whole_step.TITLES["stock"]}, split.step_s)
    print("\n".join(found) if found else "no configuration's median step is shorter than the bound's")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
