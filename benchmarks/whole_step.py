"""Benchmark: the whole PPO step seven ways (eight with streamed values), side by side, on real verl workers on CPU.

One invocation runs the same CPU dry-run PPO job (``verl_split.dryrun.recipe.dry_run_overrides``: GAE with a critic,
a reference policy for the KL loss, 2 logical GPUs, verl's ``trainer.use_v1`` by default, ``--trainer v0``
for ``RayPPOTrainer``) in these configurations (``--configs`` picks some):

- ``stock``: ``VERL_SPLIT`` unset, every role on both logical GPUs (data parallel over 2 workers);
- ``split sequential``: ``VERL_SPLIT=1 VERL_SPLIT_OVERLAP=off``, actor+rollout+ref on one logical GPU,
  the critic on the other, every phase one after the other;
- ``split + updates``: ``VERL_SPLIT_OVERLAP=updates``, the actor and critic updates at once;
- ``split + updates + prep``: ``updates,prep``, also the critic's values beside old_log_prob + ref;
- ``split + overlaps on``: ``VERL_SPLIT_OVERLAP=on``, also the critic's update left running into the next step
  (``defer_critic``), joined at the next values;
- ``split + overlaps on + shared``: ``on`` with ``VERL_SPLIT_SHARED_ROLLOUT=1``, a rollout replica on the critic's
  logical GPU too, which joins each step's generation once the deferred critic update is done;
- ``split + updates + prep + shared``: shared rollout without the deferral;
- ``split + overlaps on + streamed values``: ``on`` with ``VERL_SPLIT_STREAM_VALUES=on``, the critic pool computing
  the values of finished samples while the rest still generate (every other split configuration runs with it
  ``off``, so that they measure what their titles say). Only where this verl-split has the setting; a default
  configuration of the ``long-tail`` job, whose answers have a tail to stream into.

Every configuration runs on both trainers: verl 0.9's v1 trainer (the default) and ``RayPPOTrainer``
(``--trainer v0``, ``trainer.use_v1=false``; shared rollout there since issue 35).

The job is fixed by its sizes (``whole_step_job.py``), so that two runs measure the same work: ``--job 1to1``
(the default) or ``--job critic-heavy``, pinned per trainer from the recorded runs whose figures the docs quote,
``--job long-tail`` (the 1to1 budgets with long-tailed answers: ``VERL_SPLIT_CPU_LENGTHS=long_tail``, up to 48
tokens, the same lengths in every configuration; by default it runs stock, split sequential, split + overlaps on
and the streamed values),
or ``--job FILE``, the job a JSON of this script ran. ``--calibrate`` makes a new job instead: split sequential
runs (``calibrate``) fit each lane's time against its token budget and move the budgets until each phase has
the target work ratio within 10 % (``--update-ratio``, ``--prep-ratio``, default 1:1; ``--calibration-runs``,
default 4; ``--batch``, ``--response-length``, ``--critic-tokens``, ``--critic-epochs`` set where it starts);
with ``--repeats 0 --json FILE`` it only calibrates, and ``--job FILE`` runs what it found. The job is printed
before the results and stored in the JSON's ``settings`` row (``job``, ``workload``).

The first line printed (and the ``headline`` JSON row) is the best split configuration's whole-step speed-up
against stock with its pools' busy shares, beside the bound (``split_bound.py``): the best step a split of this
job could reach on this machine, each of its lanes the fastest measurement of that work anywhere in the run
(``whole_step_floor.py``: every configuration, every repetition), and the configuration's share of it (1.0: it
reached the bound). The ``bound`` row holds the bound's stages, each lane with its source (configuration,
repetition, what was read) and stock's scaling lane by lane; a configuration whose median step is shorter than
the bound's gets a FINDING line: the model misses something it gains.

Each repetition (``--repeats``) first measures the machine's parallel ceiling (``ceiling.py``: two bare
torch processes with the workers' thread settings, at once and one after the other), then runs the
configurations, in an order rotated by one per repetition so that drift hits them equally. A run's
value is its mean over steps 2..N-1 (step 1 pays one-off costs; the last step never defers the critic's
update, nothing follows it); tables show median [min-max] across the repetitions. Run from the
repository root on an otherwise idle machine (``make`` set-up done):

    .venv/bin/python benchmarks/whole_step.py --job 1to1 --json benchmarks/whole_step_pinned_v1_1to1.json

The jobs are heavy enough that fixed costs do not dominate (128 prompts, 16-token answers, verl's dynamic
batch size on both sides, which is the only micro-batch setting verl's v1 trainer gives the critic), one
thread per worker. Budgets hold several sequences per micro-batch: near one sequence (the 64 tokens this script
used before), verl's micro-batch balancing reruns its partitioner until every micro-batch fits
(verl/utils/seqlen_balancing.py ``rearrange_micro_batches``, the ``while True`` loop, 0.9.1), which costs
superlinearly in the samples per rank: 637 ms for 128 samples at 64 tokens (16 runs), 19 ms for 64 (7 runs),
4 ms for 128 at 256 tokens (measured on this machine). A split pool has half stock's ranks, so it paid that cost
several times over on one core: the "extra work" of split's preparation.
Numbers:

- phase table: wall time per phase (``verl_split.dryrun.report.phase_times``: ``prep`` = old_log_prob + ref +
  values, ``updates`` = both updates; with split placement from verl-split's ``split/*`` walls);
- lanes: each side's own time in the sequential run (``split/actor_update_s``, ``split/critic_update_s``;
  ``split/prep_actor_s`` = old_log_prob + ref, ``split/prep_critic_s`` = values), their ratio, and
  efficiency = ideal wall / measured wall, ideal = the longer lane, measured = the phase's wall in the run
  with that overlap on (1.0 = perfect overlap); efficiency / ceiling = how close to what two bare
  processes reach on this machine;
- speed-ups of the whole step (``timing_s/step``) of each configuration against split sequential and
  stock, and its share of the bound, per repetition;
- breakdown (``breakdown.py``): where each overlapped phase's wall goes, from the driver's lanes
  (``VERL_SPLIT_TRACE``) and the workers' own intervals and CPU time (``tests/support/plugins/phase_log.py``).

verl's v1 trainer waits for generation by polling every 2 s; in CPU mode verl-split polls every 0.05 s
(``verl_split/runtime/cpu/trainer_hooks.py``), so ``gen`` is what generating took.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import breakdown
import ceiling
import split_bound
import whole_step_floor
import whole_step_job
from whole_step_job import Job, Workload

from verl_split.core import metric_names as names
from verl_split.core import settings
from verl_split.dryrun import report
from verl_split.dryrun.assets import make_tiny_assets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, main_ppo_command, read_metrics, run_logged

PLUGINS = Path(__file__).resolve().parents[1] / "tests" / "support" / "plugins"
#: (key, title, VERL_SPLIT, VERL_SPLIT_OVERLAP); VERL_SPLIT None = unset.
#: The titles are display names, also the JSON rows' ``config``: "split + overlaps on" was "split + all" before
#: 2026-11-29 (it read as the placement ``all``, which is stock); whole_step_compare.py reads both.
CONFIGS = (
    ("stock", "stock", None, None),
    ("sequential", "split sequential", "1", "off"),
    ("updates", "split + updates", "1", "updates"),
    ("prep", "split + updates + prep", "1", "updates,prep"),
    ("all", "split + overlaps on", "1", "on"),
    ("shared", "split + overlaps on + shared", "1", "on"),
    ("shared_nodefer", "split + updates + prep + shared", "1", "updates,prep"),
    ("stream", "split + overlaps on + streamed values", "1", "on"),
)
#: Configurations that also generate on the critic pool (VERL_SPLIT_SHARED_ROLLOUT=1).
SHARED_ROLLOUT = {"shared", "shared_nodefer"}
#: Configurations that stream the values into generation's tail; every other split one runs with it off.
STREAMED = {"stream"}
STREAM_SWITCH = "VERL_SPLIT_STREAM_VALUES"
#: Each job's configurations unless --configs says: the long tail's are the arms that show what streaming gains.
DEFAULT_CONFIGS = tuple(key for key, *_ in CONFIGS if key not in STREAMED)
LONG_TAIL_CONFIGS = ("stock", "sequential", "all", "stream")
#: Per split configuration, the values left on the step's path after generation, and the share streamed.
STREAM_METRICS = (names.VALUES_AFTER_GEN_S, names.STREAM_COVERAGE)
#: verl's answer lengths per step: the tail every configuration generated (the same lengths in each).
LENGTH_METRICS = ("response_length/mean", "response_length/max")
TITLES = {key: title for key, title, _, _ in CONFIGS}
#: Which run measures which overlapped phase, against the split sequential run.
OVERLAPPED = (("updates", "updates"), ("prep", "prep"), ("updates", "all"))
#: What each configuration's run does, for which of its times measure which of the bound's lanes.
RUN_KINDS = {
    key: whole_step_floor.RunKind.of(split, overlap, key in SHARED_ROLLOUT, key in STREAMED)
    for key, _, split, overlap in CONFIGS
}
#: The runs without which some lane of the bound has no measurement (split_bound.py): two workers, and one.
BOUND_RUNS = ("stock", "sequential")
#: Stock's scaling, lane by lane: (name, the split sequential run's one-worker time in Lanes, stock's timers).
SCALING = (
    ("generation", "gen_one", ("gen",)),
    ("old_log_prob + ref", "prep_actor", ("old_log_prob", "ref")),
    ("values", "prep_critic", ("values",)),
    ("actor update", "update_actor", ("update_actor",)),
    ("critic update", "update_critic", ("update_critic",)),
)
#: Per phase, the metrics of each lane, then verl's timers to fall back on.
LANES = {
    "updates": {"actor": ("split/actor_update_s",), "critic": ("split/critic_update_s",)},
    "prep": {
        "actor": ("split/prep_actor_s", "timing_s/old_log_prob", "timing_s/ref"),
        "critic": ("split/prep_critic_s", "timing_s/values"),
    },
}


def run_job(assets, work: Workload, key: str, out: Path, steps: int) -> list[dict]:
    _, title, split, overlap = next(c for c in CONFIGS if c[0] == key)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_SPLIT", "PHASE_LOG"))}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])),
        VERL_USE_EXTERNAL_MODULES="phase_log",
        PHASE_LOG=str(out / "phase_log.jsonl"),
        OMP_NUM_THREADS="1",
    )
    if split:
        env.update(VERL_SPLIT=split, VERL_SPLIT_OVERLAP=overlap, VERL_SPLIT_TRACE=str(out / "timeline.json"))
    if key in SHARED_ROLLOUT:
        env.update(VERL_SPLIT_SHARED_ROLLOUT="1")
    if split and streaming_known():  # off where the title does not say streamed, whatever its default
        env[STREAM_SWITCH] = "on" if key in STREAMED else "off"
    env.update(work.environment())
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("phase_log.jsonl", "timeline.json"):
        (out / stale).unlink(missing_ok=True)
    overrides = dry_run_overrides(assets, steps, "gae", work.trainer, out, n_gpus_per_node=2) + work.overrides()
    done = run_logged(main_ppo_command(overrides), run_environment(out, env), out, out / LOG_FILE, out / METRICS_FILE)
    if done.returncode != 0:
        sys.exit(f"main_ppo failed ({title}, exit status {done.returncode}); see {out / LOG_FILE}")
    print(f"  {title}: {done.wall_s:.0f} s", file=sys.stderr, flush=True)
    metrics = sorted(read_metrics(out / METRICS_FILE), key=lambda m: int(m["step"]))
    # The run's last step joins a deferred critic update in the step (nothing follows to hide it behind): it
    # is left out for every configuration alike, so the means are of steady steps 2..N-1.
    return metrics[:-1] if len(metrics) >= 3 else metrics


def streaming_known() -> bool:
    """This verl-split has the streamed values' switch (it refuses a ``VERL_SPLIT_*`` name it does not know)."""
    return STREAM_SWITCH in settings.VARIABLES


def lane_means(metrics: list[dict], phase: str) -> dict[str, float]:
    """Each lane's mean over steps 2..N, from verl-split's lane metric or else verl's timers."""
    steps = report.steady_steps(metrics)
    means = {}
    for lane, keys in LANES[phase].items():
        own, timers = keys[0], keys[1:]
        means[lane] = statistics.fmean(
            float(s[own]) if own in s else sum(float(s.get(t, 0.0)) for t in timers) for s in steps
        )
    return means


#: A lane's time against its token budget, t ~ budget^-slope, before two runs have measured the slope.
FIRST_SLOPE = 0.7
#: The actor's token budget for old_log_prob and ref: large, so that its two passes cost their compute and
#: little else; the preparation is balanced on the critic's side (see calibrate).
ACTOR_PREP_TOKENS = 2048


def _budget_for(points: list[tuple[int, float]], seconds: float, floor: int) -> int:
    """The token budget at which a lane takes ``seconds``, on a log-log line through its last two (budget,
    seconds) points (slope ``FIRST_SLOPE`` with one): larger budgets, fewer micro-batches, a shorter lane."""
    (x1, t1) = points[-1]
    slope = FIRST_SLOPE
    if len(points) > 1:
        (x0, t0) = points[-2]
        if x0 != x1 and t0 > 0 and t1 > 0:
            measured = -(math.log(t1) - math.log(t0)) / (math.log(x1) - math.log(x0))
            slope = measured if measured > 0.05 else FIRST_SLOPE  # noise can flatten or flip a short step
    return max(floor, round(x1 * (t1 / seconds) ** (1 / slope)))


def calibrate(
    assets, work: Workload, out: Path, update_ratio: float, prep_ratio: float, runs: int = 4
) -> tuple[Workload, dict]:
    """Split sequential runs that tune the budgets until each phase has the target work ratio (within 10 %).

    A token budget acts on a lane's time in steps and with a slope of its own (one proportional guess on it
    measured 2.01:1 where it aimed at 1:1), so each run fits, per lane, its time against its budget through
    the last two runs and solves for the next budgets:

    - preparation: the actor's two passes (old_log_prob and ref) run with a large budget and cost about their
      compute, a floor no budget lowers; the critic's budget (``--critic-tokens``, the first run's) is what
      moves, so that values take ``1 / prep_ratio`` of the actor's lane;
    - updates: the actor's update budget moves so that it takes ``update_ratio`` times the critic's update
      at the critic's next budget (verl's v1 trainer gives the critic's update its inference budget,
      verl/trainer/ppo/v1/trainer_base.py ``_setup``, so both critic lanes move together). A larger budget
      stops paying once the whole batch is one micro-batch: for a critic more than ~1.7 times the actor,
      give it more work with ``--critic-epochs``.
    """
    trial = Workload(**{**asdict(work), "actor_epochs": work.critic_epochs, "actor_prep_tokens": ACTOR_PREP_TOKENS})
    trial.actor_update_tokens = work.critic_tokens
    history: list[dict] = []
    actor_update: list[tuple[int, float]] = []
    critic_update: list[tuple[int, float]] = []
    critic_prep: list[tuple[int, float]] = []
    for attempt in range(1, runs + 1):
        # 4 steps: two steady ones (steps 2..N-1) to measure, not one.
        metrics = run_job(assets, trial, "sequential", out / f"run{attempt}", steps=4)
        upd, prep = lane_means(metrics, "updates"), lane_means(metrics, "prep")
        k_update, k_prep = upd["actor"] / upd["critic"], prep["actor"] / prep["critic"]
        history.append(
            {
                "workload": asdict(trial),
                "update_ratio": k_update,
                "prep_ratio": k_prep,
                "updates_s": upd,
                "prep_s": prep,
            }
        )
        print(
            f"calibration run {attempt}: actor:critic {k_update:.2f}:1 in the updates (actor "
            f"{trial.actor_update_tokens} tokens, critic {trial.critic_tokens}), {k_prep:.2f}:1 in the preparation "
            f"(actor {trial.actor_prep_tokens} tokens, critic {trial.critic_tokens}); aiming at {update_ratio:g}:1 "
            f"and {prep_ratio:g}:1",
            file=sys.stderr,
            flush=True,
        )
        if (abs(k_update / update_ratio - 1) <= 0.1 and abs(k_prep / prep_ratio - 1) <= 0.1) or attempt == runs:
            break
        actor_update.append((trial.actor_update_tokens, upd["actor"]))
        critic_update.append((trial.critic_tokens, upd["critic"]))
        critic_prep.append((trial.critic_tokens, prep["critic"]))
        nxt = Workload(**asdict(trial))
        nxt.critic_tokens = _budget_for(critic_prep, prep["actor"] / prep_ratio, work.min_tokens)
        # The critic's update at its next budget, on the same kind of line, then the actor's to match it.
        critic_next = critic_update[-1][1] * (critic_update[-1][0] / nxt.critic_tokens) ** FIRST_SLOPE
        if len(critic_update) > 1 and critic_update[-1][0] != critic_update[-2][0]:
            (x0, t0), (x1, t1) = critic_update[-2:]
            slope = -(math.log(t1) - math.log(t0)) / (math.log(x1) - math.log(x0))
            critic_next = t1 * (x1 / nxt.critic_tokens) ** max(slope, 0.0)
        nxt.actor_update_tokens = _budget_for(actor_update, critic_next * update_ratio, work.min_tokens)
        trial = nxt
    # The attempt closest to both targets (a token budget moves a lane in steps, so a later one can be worse).
    best = min(
        range(len(history)),
        key=lambda i: (
            abs(math.log(history[i]["update_ratio"] / update_ratio))
            + abs(math.log(history[i]["prep_ratio"] / prep_ratio))
        ),
    )
    trial = Workload(**history[best]["workload"])
    last = history[best]
    found = {
        "update_cost_ratio": history[0]["update_ratio"],
        "prep_cost_ratio": history[0]["prep_ratio"],
        "reached_update_ratio": last["update_ratio"],
        "reached_prep_ratio": last["prep_ratio"],
        "runs": history,
        "chosen_run": best + 1,
    }
    print(
        f"calibration: reached {last['update_ratio']:.2f}:1 in the updates and {last['prep_ratio']:.2f}:1 in the "
        f"preparation (aimed at {update_ratio:g}:1 and {prep_ratio:g}:1), run {best + 1} of {len(history)}; set: actor "
        f"epochs {trial.actor_epochs}, token budgets: actor update {trial.actor_update_tokens}, actor prep "
        f"{trial.actor_prep_tokens}, critic {trial.critic_tokens}",
        file=sys.stderr,
        flush=True,
    )
    return trial, found


def stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def cell_of(s: dict[str, float], fmt: str = ".2f") -> str:
    return f"{s['median']:{fmt}} [{s['min']:{fmt}}-{s['max']:{fmt}}]"


def cell(values: list[float], fmt: str = ".2f") -> str:
    return cell_of(stats(values), fmt)


def overlapped_pairs(reps: list[dict]) -> list[tuple[str, str]]:
    """The (phase, configuration) pairs this invocation ran, with the split sequential run to compare with."""
    ran = reps[0]["metrics"]
    return [(phase, key) for phase, key in OVERLAPPED if "sequential" in ran and key in ran]


def phase_rows(reps: list[dict], target: dict[str, float] | None) -> list[dict]:
    """Each overlapped phase against split sequential; ``target`` the calibration's aim (None for a fixed job)."""
    rows = []
    for phase, key in overlapped_pairs(reps):
        per_rep = []
        for rep in reps:
            lanes = lane_means(rep["metrics"]["sequential"], phase)
            seq_wall = report.mean_phases(rep["metrics"]["sequential"])[phase]
            wall = report.mean_phases(rep["metrics"][key])[phase]
            ideal = max(lanes.values())
            per_rep.append(
                {
                    "actor_s": lanes["actor"],
                    "critic_s": lanes["critic"],
                    "ratio_value": lanes["actor"] / lanes["critic"],
                    "ideal_wall_s": ideal,
                    "wall_sequential_s": seq_wall,
                    "wall_overlap_s": wall,
                    "speedup": seq_wall / wall,
                    "efficiency": ideal / wall,
                    "ceiling": rep["ceiling"].ceiling,
                    "efficiency_vs_ceiling": ideal / wall / rep["ceiling"].ceiling,
                }
            )
        target_ratio = f"{target[phase]:g}:1" if target else None
        row = {"kind": "phase", "phase": phase, "config": TITLES[key], "target_ratio": target_ratio}
        for name in per_rep[0]:
            s = stats([r[name] for r in per_rep])
            row.update({name: s["median"], f"{name}_min": s["min"], f"{name}_max": s["max"]})
        row["ratio"] = f"{row['ratio_value']:.2f}:1"
        rows.append({**row, "per_repetition": per_rep})
    return rows


def run_lanes(metrics: list[dict], kind: whole_step_floor.RunKind) -> dict[str, tuple[float, str]]:
    """A split run's one-worker lanes (mean over the steady steps that report them) and what each was read from:
    verl-split's lane metric, else verl's timers where the preparation runs one lane after the other."""
    steps = report.steady_steps(metrics)
    lanes = {}
    for lane, (own, timers) in whole_step_floor.LANE_METRICS.items():
        values = [float(s[own]) for s in steps if own in s]
        if values:
            lanes[lane] = (statistics.fmean(values), own)
        elif timers and not kind.prep_overlapped and steps:
            lanes[lane] = (statistics.fmean(sum(float(s.get(t, 0.0)) for t in timers) for s in steps), "+".join(timers))
    return lanes


def run_measurements(reps: list[dict]) -> list[whole_step_floor.Measurement]:
    """Every run's measurement of every lane of the bound (whole_step_floor.py says what measures what)."""
    found = []
    for i, rep in enumerate(reps, start=1):
        for key, metrics in rep["metrics"].items():
            kind = RUN_KINDS[key]
            lanes = run_lanes(metrics, kind) if kind.split else {}
            found += whole_step_floor.measurements(kind, TITLES[key], i, report.mean_phases(metrics), lanes)
    return found


def best_split(reps: list[dict]) -> tuple[split_bound.BestSplit, dict] | None:
    """The best split of this job (split_bound.py) from each lane's fastest measurement in the run, and each lane's
    source; None without the stock and sequential runs (some lane would have no measurement)."""
    if not all(key in reps[0]["metrics"] for key in BOUND_RUNS):
        return None
    lanes, sources = whole_step_floor.floor_lanes(run_measurements(reps))
    return split_bound.best_split(lanes), sources


def bound_row(reps: list[dict], best: split_bound.BestSplit, sources: dict) -> dict:
    """The bound, each lane with its source, against each repetition's stock, and stock's scaling lane by lane
    (the one-worker lane against stock's two workers)."""
    lanes = split_bound.Lanes(**{lane: m.seconds for lane, m in sources.items()})
    per_rep = []
    for rep in reps:
        stock_step = report.mean_phases(rep["metrics"]["stock"])["step"]
        scaling = {
            name: getattr(lanes, one) / max(sum(steady_mean(rep, "stock", f"timing_s/{t}") for t in timers), 1e-9)
            for name, one, timers in SCALING
        }
        per_rep.append(
            {
                "stock_step_s": stock_step,
                "speedup_vs_stock": stock_step / best.step_s,
                "scaling": scaling,
            }
        )
    return {
        "kind": "bound",
        "config": "best split (split_bound.py)",
        "speedup_vs_stock": stats([r["speedup_vs_stock"] for r in per_rep]),
        "step_s": stats([best.step_s]),
        "stages_s": {
            stage: stats([getattr(best, stage)])
            for stage in ("serial_s", "generation_s", "preparation_s", "updates_s", "critic_left_s")
        },
        "critic_pool_joins": [best.critic_pool_joins],
        "lanes": {lane: whole_step_floor.source_of(m) for lane, m in sources.items()},
        "scaling": {name: stats([r["scaling"][name] for r in per_rep]) for name, *_ in SCALING},
        "per_repetition": per_rep,
    }


def step_rows(reps: list[dict], best: split_bound.BestSplit | None = None) -> list[dict]:
    rows = []
    for key, title, _, _ in CONFIGS:
        if key not in reps[0]["metrics"]:
            continue
        means = [report.mean_phases(rep["metrics"][key]) for rep in reps]
        row = {"kind": "step", "phase": "step", "config": title}
        row["phases_s"] = {p: stats([m[p] for m in means]) for p in (*report.PHASES, "step")}
        for base in (b for b in ("sequential", "stock") if b in reps[0]["metrics"]):
            ups = [report.mean_phases(r["metrics"][base])["step"] / m["step"] for r, m in zip(reps, means, strict=True)]
            row[f"speedup_vs_{base}"] = stats(ups)
        if best:  # its speed-up over stock against the bound's: the best split's step over its own
            row["share_of_bound"] = stats([best.step_s / m["step"] for m in means])
        for metric in LENGTH_METRICS:
            if all(logged(rep, key, metric) for rep in reps):
                row[metric] = stats([steady_mean(rep, key, metric) for rep in reps])
        if key != "stock":
            for pool in ("actor", "critic"):
                metric = f"split/{pool}_pool_busy_share"
                row[f"{pool}_pool_busy_share"] = stats([steady_mean(rep, key, metric) for rep in reps])
            for metric in STREAM_METRICS:  # logged by a verl-split that streams values (on or off)
                if all(logged(rep, key, metric) for rep in reps):
                    row[metric] = stats([steady_mean(rep, key, metric) for rep in reps])
        rows.append(row)
    return rows


def headline_row(rows: list[dict]) -> dict | None:
    """The best split configuration against stock (median speed-up), with its pools' busy shares, beside the bound
    and its share of it (None where the run had no stock and sequential runs to measure the bound from)."""
    split = [r for r in rows if r["kind"] == "step" and r["config"] != TITLES["stock"] and "speedup_vs_stock" in r]
    if not split:
        return None
    best = max(split, key=lambda r: r["speedup_vs_stock"]["median"])
    bound = next((r for r in rows if r["kind"] == "bound"), None)
    row = {
        "kind": "headline",
        "config": best["config"],
        "speedup_vs_stock": best["speedup_vs_stock"]["median"],
        "speedup_vs_stock_min": best["speedup_vs_stock"]["min"],
        "speedup_vs_stock_max": best["speedup_vs_stock"]["max"],
        "actor_pool_busy_share": best["actor_pool_busy_share"]["median"],
        "critic_pool_busy_share": best["critic_pool_busy_share"]["median"],
        "bound_speedup_vs_stock": None,
        "share_of_bound": None,
    }
    if bound:
        pairs = (("bound_speedup_vs_stock", bound["speedup_vs_stock"]), ("share_of_bound", best["share_of_bound"]))
        for name, source in pairs:
            row.update({name: source["median"], f"{name}_min": source["min"], f"{name}_max": source["max"]})
    return row


def _range(row: dict, name: str, unit: str = "") -> str:
    return f"{row[name]:.2f}{unit} [{row[f'{name}_min']:.2f}-{row[f'{name}_max']:.2f}]"


def print_headline(headline: dict) -> None:
    if headline["bound_speedup_vs_stock"] is None:
        bound = "no bound: it needs stock and split sequential in --configs"
    else:
        bound = (
            f"{_range(headline, 'share_of_bound')} of the best split of this job on this machine, "
            f"{_range(headline, 'bound_speedup_vs_stock', 'x')} stock (from stock's own scaling in this run)"
        )
    print(
        f"headline: {headline['config']} {_range(headline, 'speedup_vs_stock', 'x')} stock on the whole step; {bound}; "
        f"pools busy: actor {headline['actor_pool_busy_share']:.2f}, critic {headline['critic_pool_busy_share']:.2f}"
    )


def print_bound(bound: dict) -> None:
    """The bound's stages and stock's scaling, lane by lane."""
    stages = bound["stages_s"]
    joins = bound["critic_pool_joins"]
    join = (
        "both pools generating from the start"
        if all(joins) and stages["critic_left_s"]["max"] == 0.0
        else f"the critic pool joining after the critic's update, {cell_of(stages['critic_left_s'])} s in"
        if all(joins)
        else "the actor pool generating alone"
        if not any(joins)
        else f"the critic pool joining in {sum(joins)} of {len(joins)} repetitions"
    )
    print(
        f"\nthe best split of this job on this machine (split_bound.py): {bound['step_s']['median']:.2f} s a step, "
        f"{cell_of(bound['speedup_vs_stock'])}x stock (median [min-max] of the repetitions) = driver "
        f"{stages['serial_s']['median']:.2f} + generation {stages['generation_s']['median']:.2f} ({join}) + "
        f"preparation {stages['preparation_s']['median']:.2f} + the actor's update {stages['updates_s']['median']:.2f}"
    )
    print("its lanes, each the fastest measurement of that work in the run (whole_step_floor.py):")
    print("\n".join(whole_step_floor.lane_lines(bound["lanes"])))
    print(
        "stock's scaling, each lane's one-worker floor against stock's two workers: "
        + ", ".join(f"{name} {cell_of(s)}x" for name, s in bound["scaling"].items())
    )


def deferral_rows(reps: list[dict]) -> list[dict]:
    """The update phase with the critic's update deferred against the actor's update alone: without shared
    rollout (``all``) and with it (``shared``: the critic pool joins generation once the update is done)."""
    ran = reps[0]["metrics"]
    if "sequential" not in ran:
        return []
    return [row for row in (deferral_row(reps, key) for key in ("all", "shared") if key in ran) if row]


def deferral_row(reps: list[dict], key: str) -> dict | None:
    per_rep = []
    for rep in reps:
        alone = steady_mean(rep, "sequential", "split/actor_update_s")
        phase = report.mean_phases(rep["metrics"][key])["updates"]
        hidden = steady_mean(rep, key, "split/critic_update_hidden_s")
        waited = steady_mean(rep, key, "split/critic_join_wait_s")
        per_rep.append(
            {
                "update_phase_s": phase,
                "actor_alone_s": alone,
                "ratio": phase / alone,
                "hidden_s": hidden,
                "join_wait_s": waited,
            }
        )
    row = {"kind": "deferral", "config": TITLES[key]}
    for name in per_rep[0]:
        row[name] = stats([r[name] for r in per_rep])
    return row


def logged(rep: dict, key: str, metric: str) -> bool:
    """The run logged this metric in some steady step."""
    return any(metric in m for m in report.steady_steps(rep["metrics"][key]))


def steady_mean(rep: dict, key: str, metric: str) -> float:
    """A metric's mean over a run's steps 2..N, as the tables average them."""
    return statistics.mean(float(m.get(metric, 0.0)) for m in report.steady_steps(rep["metrics"][key]))


def print_tables(reps: list[dict], rows: list[dict], summaries: dict) -> None:
    keys = [key for key, *_ in CONFIGS if key in reps[0]["metrics"]]
    headline = next((r for r in rows if r["kind"] == "headline"), None)
    if headline:
        print("\n" + "-" * 100)
        print_headline(headline)
        print("-" * 100)
    bound = next((r for r in rows if r["kind"] == "bound"), None)
    if bound:
        print_bound(bound)
    means = {key: [report.mean_phases(rep["metrics"][key]) for rep in reps] for key in keys}
    shown = [p for p in report.PHASES if any(m[p] >= report.MIN_PHASE_S for ms in means.values() for m in ms)]
    print(f"\nwall time per phase, s: median [min-max] of {len(reps)} repetitions, each the mean of steps 2..N-1")
    widths = {k: max(22, len(TITLES[k]) + 2) for k in keys}  # a long title keeps its column's cells under it
    head = f"{'phase':<8}" + "".join(f"{TITLES[k]:>{widths[k]}}" for k in keys)
    print(head + "\n" + "-" * len(head))
    for phase in (*shown, "step"):
        print(f"{phase:<8}" + "".join(f"{cell([m[phase] for m in means[k]]):>{widths[k]}}" for k in keys))
    for row in (r for r in rows if r["kind"] == "step" and r["config"] != TITLES["stock"]):
        against = [b for b in ("sequential", "stock") if row["config"] != TITLES[b] and f"speedup_vs_{b}" in row]
        ups = [f"{cell_of(row[f'speedup_vs_{b}'])}x against {TITLES[b]}" for b in against]
        if "share_of_bound" in row:
            ups.append(f"{cell_of(row['share_of_bound'])} of the bound")
        if ups:  # --configs without stock or split sequential: nothing to compare against
            print(f"speed-up of the whole step, {row['config']}: {', '.join(ups)}")
    if bound:
        steps = {
            r["config"]: r["phases_s"]["step"] for r in rows if r["kind"] == "step" and r["config"] != TITLES["stock"]
        }
        for line in whole_step_floor.findings(steps, bound["step_s"]["median"]):
            print(line)
    for row in (r for r in rows if r["kind"] == "step" and "actor_pool_busy_share" in r):
        print(
            f"pools busy, {row['config']}: actor {cell_of(row['actor_pool_busy_share'])}, "
            f"critic {cell_of(row['critic_pool_busy_share'])}"
        )
    lengths = [r for r in rows if r["kind"] == "step" and all(m in r for m in LENGTH_METRICS)]
    if lengths:
        print(
            "answers, tokens (response_length/mean, /max; steps 2..N-1): "
            + "; ".join(
                f"{r['config']} {cell_of(r[LENGTH_METRICS[0]], '.1f')}, {cell_of(r[LENGTH_METRICS[1]], '.0f')}"
                for r in lengths
            )
        )
    for row in (r for r in rows if r["kind"] == "step" and names.VALUES_AFTER_GEN_S in r):
        coverage = row.get(names.STREAM_COVERAGE)
        streamed = f", streamed {cell_of(coverage)} of the samples" if coverage else ""
        print(f"values after generation, {row['config']}: {cell_of(row[names.VALUES_AFTER_GEN_S])} s a step{streamed}")
    for deferral in (r for r in rows if r["kind"] == "deferral"):
        print(
            f"update phase with the critic's update deferred ({deferral['config']}): "
            f"{cell_of(deferral['update_phase_s'])} s against the actor's update alone (split sequential) "
            f"{cell_of(deferral['actor_alone_s'])} s: {cell_of(deferral['ratio'])}x; critic update hidden "
            f"{cell_of(deferral['hidden_s'])} s, waited for at the join {cell_of(deferral['join_wait_s'])} s per step"
        )
    for key in (k for k in keys if k in SHARED_ROLLOUT):
        share = [steady_mean(rep, key, "split/critic_pool_rollout_share") for rep in reps]
        push = [steady_mean(rep, key, "split/shared_rollout_sync_s") for rep in reps]
        joined = [steady_mean(rep, key, "split/critic_pool_joined") for rep in reps]
        join_s = [steady_mean(rep, key, "split/critic_pool_join_s") for rep in reps]
        saved = [steady_mean(rep, key, "split/shared_rollout_saved_estimate_s") for rep in reps]
        print(
            f"{TITLES[key]}: requests generated on the critic pool {cell(share)}, weight push {cell(push, '.3f')} s; "
            f"steps the critic pool joined {cell(joined)}, {cell(join_s)} s after generation began, saving an "
            f"estimated {cell(saved)} s of generation (median [min-max] of the per-step means)"
        )
    if not any(r["kind"] == "phase" for r in rows):
        return
    print("\nlanes in the split sequential run (s), and the overlap: median [min-max]")
    head = (
        f"{'phase':<8}{'overlap in':>17}{'actor':>7}{'critic':>7}{'ratio':>8}{'ideal':>7}{'wall seq':>9}"
        f"{'wall ovl':>9}{'speed-up':>9}{'efficiency':>19}{'ceiling':>19}{'eff/ceiling':>19}"
    )
    print(head + "\n" + "-" * len(head))
    for r in (r for r in rows if r["kind"] == "phase"):
        values = {k: [p[k] for p in r["per_repetition"]] for k in ("efficiency", "ceiling", "efficiency_vs_ceiling")}
        print(
            f"{r['phase']:<8}{r['config']:>17}{r['actor_s']:7.2f}{r['critic_s']:7.2f}{r['ratio']:>8}"
            f"{r['ideal_wall_s']:7.2f}{r['wall_sequential_s']:9.2f}{r['wall_overlap_s']:9.2f}{r['speedup']:8.2f}x"
            + "".join(f"{cell(values[k]):>19}" for k in values)
        )
    median_ceiling = statistics.median(rep["ceiling"].ceiling for rep in reps)
    for (phase, key), summary in summaries.items():
        if summary:
            print("\n" + breakdown.table(f"{phase} phase, split sequential vs {TITLES[key]}", summary, median_ceiling))


#: The calibration's options: each sets what a new job is calibrated from or towards (their defaults here).
CALIBRATION_DEFAULTS = {
    "batch": 128,
    "response_length": 16,
    "critic_tokens": 256,
    "critic_epochs": 1,
    "update_ratio": 1.0,
    "prep_ratio": 1.0,
    "calibration_runs": 4,
}


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, Job | None]:
    """The options, checked before any run; the job to run, or None where ``--calibrate`` makes one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of the runs (default %(default)s)")
    parser.add_argument("--steps", type=int, default=5, help="PPO steps per run; steps 1 and N are not averaged")
    parser.add_argument(
        "--trainer", choices=("v1", "v0"), default=None, help="verl trainer (default v1; a job file's own)"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--job",
        default=None,
        help=f"the job: pinned ({', '.join(whole_step_job.NAMES)}, for --trainer) or a JSON this script wrote "
        "(default 1to1)",
    )
    which.add_argument(
        "--calibrate",
        action="store_true",
        help="make a new job: split sequential runs move the token budgets to --update-ratio and --prep-ratio",
    )
    calibration = parser.add_argument_group("calibration (with --calibrate)")
    calibration.add_argument("--batch", type=int, help="prompts per step, one mini-batch (default 128)")
    calibration.add_argument("--response-length", type=int, help="tokens per answer (default 16)")
    calibration.add_argument(
        "--critic-tokens", type=int, help="the critic's tokens per micro-batch in the first run (default 256)"
    )
    calibration.add_argument("--critic-epochs", type=int, help="critic PPO epochs (default 1)")
    calibration.add_argument("--update-ratio", type=float, help="actor:critic work in the updates (default 1)")
    calibration.add_argument("--prep-ratio", type=float, help="actor:critic work in the preparation (default 1)")
    calibration.add_argument("--calibration-runs", type=int, help="at most this many calibration runs (default 4)")
    parser.add_argument(
        "--ceiling-seconds", type=float, default=2.0, help="work per bare process (default %(default)s)"
    )
    parser.add_argument("--work-dir", default=None, help="where runs write (default: a temporary folder)")
    parser.add_argument(
        "--json", default=None, help="write the rows as a JSON list to this file (its job: --job FILE runs it again)"
    )
    parser.add_argument(
        "--configs",
        default=None,
        help=f"comma list of the configurations to run, of {', '.join(TITLES)} (default: {','.join(DEFAULT_CONFIGS)}; "
        f"for the long-tail job {','.join(LONG_TAIL_CONFIGS)}); the overlap tables and the bound need sequential, "
        "the bound stock too",
    )
    args = parser.parse_args(argv)
    asked = args.configs is not None
    wanted = [c.strip() for c in args.configs.split(",") if c.strip()] if asked else None
    unknown = sorted(set(wanted or ()) - set(TITLES))
    if unknown or wanted == []:
        parser.error(f"--configs: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(TITLES)}")
    if wanted and STREAMED & set(wanted) and not streaming_known():
        parser.error(
            f"--configs: {', '.join(sorted(STREAMED & set(wanted)))} streams the values ({STREAM_SWITCH}), which this "
            "verl-split does not have; leave it out of --configs"
        )
    args.configs = wanted
    given = [name for name in CALIBRATION_DEFAULTS if getattr(args, name) is not None]
    if given and not args.calibrate:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        parser.error(
            f"{flags}: calibration options, and this run has a fixed job; add --calibrate to make a new job, or run "
            f"a pinned one with --job ({', '.join(whole_step_job.NAMES)})"
        )
    for name, default in CALIBRATION_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.calibrate:
        args.trainer = args.trainer or "v1"
        args.configs = args.configs or list(DEFAULT_CONFIGS)
        return args, None
    try:
        job = whole_step_job.resolve(args.job or "1to1", args.trainer)
    except ValueError as error:
        parser.error(str(error))
    args.trainer = job.workload.trainer
    if args.configs is None:
        args.configs = default_configs(job)
    return args, job


def default_configs(job: Job) -> list[str]:
    """The configurations a job runs unless --configs says: the long tail's arms for long-tailed answers (less the
    streamed one where this verl-split cannot stream), else every configuration but the streamed one."""
    if job.workload.lengths != "long_tail":
        return list(DEFAULT_CONFIGS)
    return [key for key in LONG_TAIL_CONFIGS if key not in STREAMED or streaming_known()]


def main(argv: list[str] | None = None) -> int:
    args, job = parse_args(argv)
    started, load_before = time.monotonic(), os.getloadavg()
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="verl_split_whole_step_")).resolve()
    assets = make_tiny_assets(work_dir / "assets")
    found = None
    if job is None:
        start = Workload(
            args.batch,
            args.response_length,
            max(args.critic_tokens, whole_step_job.MAX_PROMPT + args.response_length),
            args.critic_epochs,
            args.critic_epochs,
            0,
            0,
            args.trainer,
        )
        print(f"calibrating in {work_dir} ...", file=sys.stderr, flush=True)
        work, found = calibrate(
            assets, start, work_dir / "calibration", args.update_ratio, args.prep_ratio, args.calibration_runs
        )
        job = Job(
            "calibrated",
            f"calibrated in this run: reached {found['reached_update_ratio']:.2f}:1 in the updates and "
            f"{found['reached_prep_ratio']:.2f}:1 in the preparation (aimed at {args.update_ratio:g}:1 and "
            f"{args.prep_ratio:g}:1), run {found['chosen_run']} of {len(found['runs'])}",
            work,
        )
    print(job.describe(), file=sys.stderr, flush=True)
    configs = [c for c in CONFIGS if c[0] in args.configs]
    iterations = ceiling.iterations_for(args.ceiling_seconds) if args.repeats else 0
    reps = []
    for i in range(args.repeats):
        rep = {"ceiling": ceiling.measure(iterations), "metrics": {}, "out": {}}
        print(f"repetition {i + 1}/{args.repeats}: ceiling {rep['ceiling'].ceiling:.2f}", file=sys.stderr, flush=True)
        order = configs[i % len(configs) :] + configs[: i % len(configs)]
        for key, *_ in order:
            rep["out"][key] = work_dir / f"rep{i + 1}" / key
            rep["metrics"][key] = run_job(assets, job.workload, key, rep["out"][key], args.steps)
        reps.append(rep)
    rows, summaries = results(reps, args, found) if reps else ([], {})
    minutes = (time.monotonic() - started) / 60
    if reps:
        print("\n" + job.describe())
        print_tables(reps, rows, summaries)
        print(
            f"\n{len(reps)} repetitions in {minutes:.1f} min; load average {load_before[0]:.2f} before, "
            f"{os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs; work in {work_dir}"
        )
    if args.json:  # with --repeats 0, the calibration alone: its job for --job FILE
        settings = {
            "kind": "settings",
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU used",
            "minutes": minutes,
            "load_average_before": load_before[0],
            "load_average_after": os.getloadavg()[0],
            "repeats": args.repeats,
            "steps": args.steps,
            "configs": args.configs,
            "job": {"name": job.name, "source": job.source},
            "workload": asdict(job.workload),
            "calibration": found,
            "ceilings": [rep["ceiling"].to_json() for rep in reps],
        }
        breakdown_rows = [
            {"kind": "breakdown", "phase": p, "config": TITLES[k], **s} for (p, k), s in summaries.items() if s
        ]
        Path(args.json).write_text(json.dumps([settings, *rows, *breakdown_rows], indent=2) + "\n")
    return 0


def results(reps: list[dict], args: argparse.Namespace, found: dict | None) -> tuple[list[dict], dict]:
    """The rows (headline, bound, deferral, phases, steps) and the breakdown of each overlapped phase."""
    target = {"updates": args.update_ratio, "prep": args.prep_ratio} if found else None
    found = best_split(reps)
    best = found[0] if found else None
    rows = phase_rows(reps, target) + ([bound_row(reps, *found)] if found else []) + step_rows(reps, best)
    rows = [r for r in (headline_row(rows),) if r] + deferral_rows(reps) + rows
    summaries = {}
    for phase, key in overlapped_pairs(reps):
        per_run = {
            k: [
                breakdown.run_breakdown(
                    r["out"][k], r["metrics"][k], phase, [int(s["step"]) for s in report.steady_steps(r["metrics"][k])]
                )
                for r in reps
            ]
            for k in ("sequential", key)
        }
        summaries[(phase, key)] = breakdown.compare(per_run["sequential"], per_run[key])
    return rows, summaries


if __name__ == "__main__":
    sys.exit(main())
