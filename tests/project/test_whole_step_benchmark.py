"""``benchmarks/whole_step.py``'s job and bound, without running verl: the bound's arithmetic against cases worked by
hand, the bound and the headline from a repetition's step metrics, the pinned jobs against the recorded runs whose
figures the docs quote, the options that pick a job, and ``whole_step_compare.py``'s verdict.

The expected figures are worked on paper in each test's comment, not computed by the code under test."""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.unit

BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    """The benchmark's modules, imported as the script imports them (its folder on ``sys.path``)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return {name: importlib.import_module(name) for name in ("split_bound", "whole_step_job", "whole_step")}


def lanes(bench, **kw):
    return bench["split_bound"].Lanes(**kw)


def test_the_critic_pool_joins_generation_after_the_critics_left_over(bench):
    # The critic's update outlasts the actor's by 2.0 - 1.2 = 0.8 s. In those 0.8 s the actor pool generates alone at
    # 1/4 of the batch a second: 0.2 of it. The other 0.8 both pools generate at 1/3 a second: 2.4 s. Generation
    # 0.8 + 2.4 = 3.2 s; preparation max(1.0, 0.8) = 1.0; the step 0.3 + 3.2 + 1.0 + 1.2 = 5.7 s.
    best = bench["split_bound"].best_split(
        lanes(
            bench,
            gen_one=4.0,
            gen_two=3.0,
            prep_actor=1.0,
            prep_critic=0.8,
            update_actor=1.2,
            update_critic=2.0,
            serial=0.3,
        )
    )
    assert best.critic_pool_joins and best.critic_left_s == pytest.approx(0.8)
    assert best.generation_s == pytest.approx(3.2)
    assert best.preparation_s == pytest.approx(1.0)
    assert best.step_s == pytest.approx(5.7)


def test_a_left_over_longer_than_generation_delays_the_values(bench):
    # Left-over 3.0 - 0.5 = 2.5 s, longer than the actor pool's whole generation (2.0 s): the critic pool never
    # joins, generation is 2.0 s, the critic's update ends 0.5 s into the preparation and values take 0.8 s after
    # it: 1.3 s, longer than old_log_prob + ref (1.0). The step 0.2 + 2.0 + 1.3 + 0.5 = 4.0 s.
    best = bench["split_bound"].best_split(
        lanes(
            bench,
            gen_one=2.0,
            gen_two=1.5,
            prep_actor=1.0,
            prep_critic=0.8,
            update_actor=0.5,
            update_critic=3.0,
            serial=0.2,
        )
    )
    assert not best.critic_pool_joins
    assert best.generation_s == pytest.approx(2.0)
    assert best.preparation_s == pytest.approx(1.3)
    assert best.step_s == pytest.approx(4.0)


def test_two_replicas_no_faster_than_one_leave_generation_to_the_actor_pool(bench):
    # Both pools generate in 3.2 s, the actor pool alone in 3.0: joining would slow it. Nothing is left over (the
    # critic's update, 1.0 s, ends before the actor's, 1.5 s). The step 0.1 + 3.0 + max(1.0, 0.8) + 1.5 = 5.6 s.
    best = bench["split_bound"].best_split(
        lanes(
            bench,
            gen_one=3.0,
            gen_two=3.2,
            prep_actor=1.0,
            prep_critic=0.8,
            update_actor=1.5,
            update_critic=1.0,
            serial=0.1,
        )
    )
    assert not best.critic_pool_joins and best.critic_left_s == 0.0
    assert best.step_s == pytest.approx(5.6)


@pytest.mark.parametrize(
    ("update_actor_two", "update_critic_two"), [(0.75, 0.75), (0.5, 1.0)], ids=["1to1", "critic-heavy"]
)
def test_with_phases_that_halve_on_two_workers_the_best_split_ties_stock(bench, update_actor_two, update_critic_two):
    # Stock on two workers: generation 2.0, old_log_prob + ref 0.5, values 0.5, the updates as given (1.5 s in
    # all both ways), driver 0.25: a 4.75 s step. On one worker each phase takes twice that. 1:1: nothing left
    # over, generation 2.0 on both pools, preparation 1.0, the actor's update 1.5: 4.75 s. Critic-heavy: the critic
    # (2.0) outlasts the actor (1.0) by 1.0 s; the actor pool alone generates 1/4 of the batch in it, both pools the
    # other 3/4 in 1.5 s: generation 2.5, preparation 1.0, the actor's update 1.0: 4.75 s. A tie both times
    # (DESIGN.md section 5: with linear scaling no split beats stock).
    best = bench["split_bound"].best_split(
        lanes(
            bench,
            gen_one=4.0,
            gen_two=2.0,
            prep_actor=1.0,
            prep_critic=1.0,
            update_actor=2 * update_actor_two,
            update_critic=2 * update_critic_two,
            serial=0.25,
        )
    )
    assert best.step_s == pytest.approx(4.75)


def step(n, **metrics):
    return {"step": n, **metrics}


def repetition():
    """One repetition's runs as run_job returns them (the last step already dropped): step 1 pays start-up, step 2
    is what the means read. The lanes are the first test's."""
    stock = {
        "timing_s/gen": 3.0,
        "timing_s/old_log_prob": 0.3,
        "timing_s/ref": 0.2,
        "timing_s/values": 0.4,
        "timing_s/adv": 0.1,
        "timing_s/update_critic": 0.6,
        "timing_s/update_actor": 0.5,
        "timing_s/step": 5.3,  # other: 5.3 - 3.0 - 0.9 - 0.1 - 1.1 = 0.2
    }
    sequential = {
        "timing_s/gen": 4.0,
        "split/prep_actor_s": 1.0,
        "split/prep_critic_s": 0.8,
        "split/prep_wall_s": 1.8,
        "split/actor_update_s": 1.2,
        "split/critic_update_s": 2.0,
        "split/update_wall_s": 3.2,
        "timing_s/adv": 0.1,
        "timing_s/step": 9.5,  # other: 9.5 - 4.0 - 1.8 - 0.1 - 3.2 = 0.4
    }
    shared = {"timing_s/gen": 3.4, "timing_s/step": 6.0, "split/actor_pool_busy_share": 0.9}
    runs = {"stock": stock, "sequential": sequential, "shared": shared}
    return {"metrics": {key: [step(1, **{"timing_s/step": 60.0}), step(2, **m)] for key, m in runs.items()}}


def test_the_bound_and_the_headline_from_a_repetitions_metrics(bench, capsys):
    ws = bench["whole_step"]
    reps = [repetition()]
    best, sources = ws.best_split(reps)
    # The driver's time: stock's adv + other 0.1 + 0.2 = 0.3, split sequential's 0.1 + 0.4 = 0.5: the shorter, 0.3.
    # The shared run's 3.4 s of generation is longer than stock's 3.0, and it timed no preparation or update (0 s:
    # no measurement). The lanes are then the first test's: a 5.7 s best split, against stock's 5.3 s: 0.93x.
    assert best.step_s == pytest.approx(5.7)
    bound = ws.bound_row(reps, best, sources)
    assert bound["speedup_vs_stock"]["median"] == pytest.approx(5.3 / 5.7)
    assert bound["lanes"]["gen_two"] == {"seconds": 3.0, "config": "stock", "repetition": 1, "measure": "gen phase"}
    assert bound["lanes"]["update_critic"]["config"] == "split sequential"
    # One worker against two: generation 4.0 / 3.0, old_log_prob + ref 1.0 / 0.5, values 0.8 / 0.4, the actor's
    # update 1.2 / 0.5, the critic's 2.0 / 0.6.
    scaling = {name: s["median"] for name, s in bound["scaling"].items()}
    assert scaling == pytest.approx(
        {
            "generation": 4.0 / 3.0,
            "old_log_prob + ref": 2.0,
            "values": 2.0,
            "actor update": 2.4,
            "critic update": 2.0 / 0.6,
        }
    )
    rows = [bound, *ws.step_rows(reps, best)]
    headline = ws.headline_row(rows)
    # split + overlaps on + shared: 6.0 s against stock's 5.3 (0.88x) and the best split's 5.7: 5.7 / 6.0 = 0.95 of it.
    assert headline["config"] == "split + overlaps on + shared"
    assert headline["speedup_vs_stock"] == pytest.approx(5.3 / 6.0)
    assert headline["bound_speedup_vs_stock"] == pytest.approx(5.3 / 5.7)
    assert headline["share_of_bound"] == pytest.approx(0.95)
    ws.print_headline(headline)
    assert (
        "headline: split + overlaps on + shared 0.88x [0.88-0.88] stock on the whole step; 0.95 [0.95-0.95] of the "
        "best split of this job on this machine, 0.93x [0.93-0.93] stock" in capsys.readouterr().out
    )


def all_run(step_s: float = 6.0) -> dict:
    """split + all's one steady step: generation and two lanes faster than split sequential measured them."""
    return {
        "timing_s/gen": 3.6,
        "split/prep_wall_s": 0.9,
        "split/prep_actor_s": 0.85,
        "split/prep_critic_s": 0.9,
        "split/critic_update_deferred": 1.0,
        "timing_s/update_critic": 0.05,  # the deferred update's dispatch
        "timing_s/update_actor": 1.0,
        "split/actor_update_s": 1.0,
        "split/critic_update_s": 1.9,
        "timing_s/adv": 0.1,
        "timing_s/step": step_s,
    }


def test_a_faster_measurement_in_another_configuration_lowers_the_bound_and_is_named(bench, capsys):
    ws = bench["whole_step"]
    reps = [repetition(), repetition()]
    reps[1]["metrics"]["all"] = [step(1, **{"timing_s/step": 60.0}), step(2, **all_run())]
    best, sources = ws.best_split(reps)
    # Each lane's fastest anywhere: the actor pool generating alone 3.6 s (split + overlaps on, repetition 2) against
    # split sequential's 4.0; old_log_prob + ref 0.85 (its lane metric there) against 1.0; the actor's update 1.0
    # against 1.2 (its phase, the dispatch with it, is 1.05); the critic's 1.9 against 2.0; values 0.8 and two replicas
    # 3.0 stay. Left-over 1.9 - 1.0 = 0.9 s; generation 3.0 + 0.9 (1 - 3.0 / 3.6) = 3.15; preparation
    # max(0.85, 0.8) = 0.85; the step 0.3 + 3.15 + 0.85 + 1.0 = 5.3 s, where split sequential's lanes gave 5.7.
    assert best.step_s == pytest.approx(5.3)
    assert {lane: (m.config, m.repetition, m.measure) for lane, m in sources.items()} == {
        "gen_one": ("split + overlaps on", 2, "gen phase"),
        "gen_two": ("stock", 1, "gen phase"),
        "prep_actor": ("split + overlaps on", 2, "split/prep_actor_s"),
        "prep_critic": ("split sequential", 1, "split/prep_critic_s"),
        "update_actor": ("split + overlaps on", 2, "split/actor_update_s"),
        "update_critic": ("split + overlaps on", 2, "split/critic_update_s"),
        "serial": ("stock", 1, "reward+adv+other"),
    }
    rows = [ws.bound_row(reps, best, sources), *ws.step_rows(reps, best)]
    ws.print_bound(rows[0])
    out = capsys.readouterr().out
    assert "  gen_one       3.60 s (split + overlaps on, repetition 2, gen phase)" in out


def test_a_configuration_faster_than_the_bound_is_a_finding(bench, capsys):
    ws = bench["whole_step"]
    reps = [repetition(), repetition()]
    # split + all at 5.0 s a step in both repetitions, shorter than its own phases (3.6 + 0.9 + 0.1 + 1.05 = 5.65 s;
    # other reads 0): what the model cannot explain. Its driver time is then adv alone, 0.1 s, and the bound's step
    # 0.1 + 3.15 + 0.85 + 1.0 = 5.1 s (the previous test's lanes otherwise).
    for rep in reps:
        rep["metrics"]["all"] = [step(1, **{"timing_s/step": 60.0}), step(2, **all_run(step_s=5.0))]
    best, sources = ws.best_split(reps)
    rows = [ws.bound_row(reps, best, sources), *ws.step_rows(reps, best)]
    ws.print_tables(reps, rows, {})
    findings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FINDING")]
    # 5.1 / 5.0 = 1.02 of the bound; split + overlaps on + shared's 6.0 s is no finding.
    assert findings == [
        "FINDING: split + overlaps on's median step 5.00 s is shorter than the bound's 5.10 s (1.02 of the bound): "
        "the model misses what this configuration gains"
    ]


def test_the_headline_says_so_where_the_run_had_no_bound(bench, capsys):
    ws = bench["whole_step"]
    reps = [repetition()]
    del reps[0]["metrics"]["sequential"]
    assert ws.best_split(reps) is None
    headline = ws.headline_row(ws.step_rows(reps))
    ws.print_headline(headline)
    assert "no bound: it needs stock and split sequential in --configs" in capsys.readouterr().out


PINNED = sorted(BENCHMARKS.glob("whole_step_pinned_*.json"))


@pytest.mark.parametrize("path", PINNED, ids=[p.stem for p in PINNED])
def test_the_pinned_runs_bound_rebuilt_from_every_configuration_is_a_bound(bench, monkeypatch, capsys, path):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    floor = importlib.import_module("whole_step_floor")
    rows = floor.current_names(json.loads(path.read_text()))  # "split + all" in JSONs before 2026-11-29
    kinds = {bench["whole_step"].TITLES[key]: kind for key, kind in bench["whole_step"].RUN_KINDS.items()}
    _, sources = floor.floor_lanes(floor.from_rows(rows, kinds))
    steps = {r["config"]: r["phases_s"] for r in rows if r["kind"] == "step"}
    old = next(r for r in rows if r["kind"] == "bound")
    for rep in old["per_repetition"]:  # never longer than the one sample each lane had before
        for lane, seconds in rep["lanes"].items():
            assert sources[lane].seconds <= seconds + 1e-9, lane
    # Each lane is some configuration's fastest repetition or one of split sequential's, as the JSON holds them.
    for lane, m in sources.items():
        if m.repetition is None:
            phase = {"gen_one": "gen", "gen_two": "gen", "serial": None}.get(lane) or m.measure.split()[0]
            if phase in steps[m.config]:
                assert m.seconds == pytest.approx(steps[m.config][phase]["min"]), lane
    assert floor.main([str(path)]) == 0  # no configuration's median step under the rebuilt bound
    assert "no configuration's median step is shorter than the bound's" in capsys.readouterr().out


def test_the_v1_1to1_bound_takes_generation_alone_from_split_all_not_split_sequential(bench, monkeypatch):
    # The review's case: the actor pool generating alone took 6.34-6.96 s in split sequential, 4.60-7.22 s in split +
    # all (no shared rollout there either); the bound now takes split + all's fastest repetition, 4.60 s.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    floor = importlib.import_module("whole_step_floor")
    rows = json.loads((BENCHMARKS / "whole_step_pinned_v1_1to1.json").read_text())
    kinds = {bench["whole_step"].TITLES[key]: kind for key, kind in bench["whole_step"].RUN_KINDS.items()}
    _, sources = floor.floor_lanes(floor.from_rows(rows, kinds))
    assert (sources["gen_one"].config, round(sources["gen_one"].seconds, 2)) == ("split + overlaps on", 4.60)


def test_current_names_renames_a_copy_and_leaves_the_callers_rows_as_they_were(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    floor = importlib.import_module("whole_step_floor")
    lane = {"seconds": 4.6, "config": "split + all", "repetition": None, "measure": "gen"}
    rows = [{"kind": "step", "config": "split + all"}, {"kind": "bound", "lanes": {"gen_one": lane}}]
    before = json.loads(json.dumps(rows))
    renamed = floor.current_names(rows)
    assert rows == before  # the bound row (no ``config`` of its own) too: its lanes are rewritten in a copy
    assert renamed[0]["config"] == renamed[1]["lanes"]["gen_one"]["config"] == "split + overlaps on"


@pytest.mark.parametrize(
    ("trainer", "name"), [("v1", "1to1"), ("v1", "critic-heavy"), ("v0", "1to1"), ("v0", "critic-heavy")]
)
def test_each_pinned_job_is_the_one_its_recorded_run_landed_on(bench, trainer, name):
    pin = bench["whole_step_job"].PINNED[(trainer, name)]
    settings = json.loads((BENCHMARKS / pin.recorded).read_text())[0]
    assert asdict(pin.workload) == {**settings["workload"], "lengths": "fixed"}  # recorded before the setting
    chosen = settings["calibration"]["runs"][settings["calibration"]["chosen_run"] - 1]
    assert chosen["workload"] == settings["workload"]
    assert (
        pin.reached == f"{chosen['update_ratio']:.2f}:1 in the updates, {chosen['prep_ratio']:.2f}:1 in the preparation"
    )


@pytest.mark.parametrize("trainer", ["v1", "v0"])
def test_the_long_tail_job_is_the_1to1_budgets_with_long_tailed_answers(bench, trainer):
    jobs = bench["whole_step_job"]
    one, tail = (jobs.pinned(name, trainer).workload for name in ("1to1", "long-tail"))
    assert asdict(tail) == {**asdict(one), "response_length": 48, "lengths": "long_tail"}
    assert min(tail.critic_tokens, tail.actor_update_tokens) >= tail.min_tokens  # the longest sequence fits
    assert tail.environment() == {"VERL_SPLIT_CPU_LENGTHS": "long_tail"} and one.environment() == {}
    assert "long-tailed answers of at most 48 tokens" in tail.describe()


def test_the_long_tail_job_runs_its_arms_and_the_streamed_one_with_the_setting(bench, monkeypatch):
    ws = bench["whole_step"]
    args, job = ws.parse_args(["--job", "long-tail", "--trainer", "v0"])
    assert job.workload.trainer == "v0"
    assert args.configs == ["stock", "sequential", "all", "stream"]  # this verl-split has VERL_SPLIT_STREAM_VALUES
    assert ws.parse_args([])[0].configs == [key for key, *_ in ws.CONFIGS if key != "stream"]
    # A verl-split without the switch refuses the variable: the arm is left out, and refused where asked for.
    monkeypatch.delitem(ws.settings.VARIABLES, "VERL_SPLIT_STREAM_VALUES")
    assert ws.parse_args(["--job", "long-tail"])[0].configs == ["stock", "sequential", "all"]
    with pytest.raises(SystemExit):
        ws.parse_args(["--job", "long-tail", "--configs", "all,stream"])


def test_the_streamed_runs_values_are_no_floor_of_the_values(bench, monkeypatch):
    # Its preparation holds only the values left after generation: neither its lane metric nor its wall measures
    # the values' work; old_log_prob + ref still run whole in it.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    floor = importlib.import_module("whole_step_floor")
    kind = bench["whole_step"].RUN_KINDS["stream"]
    phases = {"gen": 5.0, "reward": 0.0, "adv": 0.1, "other": 0.2, "prep": 1.0, "updates": 2.0}
    lanes_read = {"prep_critic": (0.3, "split/prep_critic_s"), "prep_actor": (1.0, "split/prep_actor_s")}
    measured = {
        m.lane for m in floor.measurements(kind, "split + overlaps on + streamed values", 1, phases, lanes_read)
    }
    assert "prep_critic" not in measured and "prep_actor" in measured


def test_the_long_tail_tables_print_the_answers_the_pools_and_the_values_left(bench, capsys):
    ws = bench["whole_step"]
    tail = {"response_length/mean": 18.6, "response_length/max": 48.0}
    left = {"split/actor_pool_busy_share": 0.8, "split/critic_pool_busy_share": 0.5, **tail}
    streamed = {**all_run(5.0), **left, "split/values_after_gen_s": 0.1, "split/stream_coverage": 0.9}
    runs = {"all": {**all_run(), **left, "split/values_after_gen_s": 0.9}, "stream": streamed}
    reps = [{"metrics": {key: [step(1, **{"timing_s/step": 60.0}), step(2, **m)] for key, m in runs.items()}}]
    ws.print_tables(reps, ws.step_rows(reps), {})
    out = capsys.readouterr().out
    assert (
        "answers, tokens (response_length/mean, /max; steps 2..N-1): split + overlaps on 18.6 [18.6-18.6], 48 [48-48]"
        in out
    )
    assert "pools busy, split + overlaps on + streamed values: actor 0.80 [0.80-0.80], critic 0.50" in out
    assert "values after generation, split + overlaps on: 0.90 [0.90-0.90] s a step\n" in out
    assert "values after generation, split + overlaps on + streamed values: 0.10 [0.10-0.10] s a step, streamed " in out


def test_a_results_json_is_a_job_and_its_trainer_is_its_own(bench, capsys):
    ws = bench["whole_step"]
    args, job = ws.parse_args(["--job", str(BENCHMARKS / "whole_step_v0_critic_heavy.json")])
    assert job.workload == ws.whole_step_job.pinned("critic-heavy", "v0").workload and args.trainer == "v0"
    args, job = ws.parse_args(["--trainer", "v0", "--job", "critic-heavy"])
    assert job.workload.trainer == "v0" and job.workload.actor_update_tokens == 417
    args, job = ws.parse_args([])
    assert job.name == "v1 1to1" and job.workload.trainer == "v1"
    with pytest.raises(SystemExit):
        ws.parse_args(["--trainer", "v1", "--job", str(BENCHMARKS / "whole_step_v0_critic_heavy.json")])
    assert "ran on the v0 trainer, --trainer asks for v1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--update-ratio", "0.5", "--critic-epochs", "2"], "--critic-epochs, --update-ratio: calibration options"),
        (["--job", "critic-heavy", "--calibrate"], "not allowed with argument"),
        (["--job", "nowhere.json"], "neither a pinned job (1to1, critic-heavy, long-tail) nor a file"),
        (["--job", str(BENCHMARKS / "control_plane.json")], "no job in it"),
    ],
)
def test_a_job_that_cannot_be_run_is_refused_before_any_run(bench, capsys, argv, says):
    with pytest.raises(SystemExit):
        bench["whole_step"].parse_args(argv)
    assert says in capsys.readouterr().err


def test_calibrate_keeps_its_options_and_makes_the_job(bench):
    args, job = bench["whole_step"].parse_args(["--calibrate", "--update-ratio", "0.5", "--trainer", "v0"])
    assert job is None and args.update_ratio == 0.5 and args.prep_ratio == 1.0 and args.trainer == "v0"


def write_run(path, workload, speedup, config="split + overlaps on + shared"):
    rows = [
        {"kind": "settings", "date": "d", "workload": workload},
        {"kind": "step", "config": config, "speedup_vs_stock": speedup},
    ]
    path.write_text(json.dumps(rows))
    return path


def test_compare_agrees_where_the_ranges_overlap_and_refuses_two_jobs(monkeypatch, tmp_path, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    compare = importlib.import_module("whole_step_compare")
    job = {"batch": 128}
    a = write_run(tmp_path / "a.json", job, {"min": 1.04, "median": 1.08, "max": 1.12})
    b = write_run(tmp_path / "b.json", job, {"min": 1.10, "median": 1.11, "max": 1.13})  # 1.10-1.12 in common
    c = write_run(tmp_path / "c.json", job, {"min": 1.13, "median": 1.15, "max": 1.17})  # above a's 1.12
    other = write_run(tmp_path / "other.json", {"batch": 64}, {"min": 1.0, "median": 1.0, "max": 1.0})
    assert compare.main([str(a), str(b)]) == 0
    assert compare.main([str(a), str(c)]) == 1
    differ = "split + overlaps on + shared: 1.08 [1.04-1.12] against 1.15 [1.13-1.17] x stock: DIFFER"
    assert differ in capsys.readouterr().out
    assert compare.main([str(a), str(other)]) == 2


def test_compare_reads_a_run_recorded_under_the_former_name(monkeypatch, tmp_path, capsys):
    """Runs recorded before 2026-11-29 name "split + overlaps on + shared" "split + all + shared"."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    compare = importlib.import_module("whole_step_compare")
    job, speedup = {"batch": 128}, {"min": 1.04, "median": 1.08, "max": 1.12}
    old = write_run(tmp_path / "old.json", job, speedup, config="split + all + shared")
    assert compare.main([str(old), str(write_run(tmp_path / "new.json", job, speedup))]) == 0
    assert "split + overlaps on + shared: 1.08 [1.04-1.12] against 1.08 [1.04-1.12] x stock: agree" in (
        capsys.readouterr().out
    )


def test_compare_takes_a_run_from_before_the_lengths_setting_as_fixed_lengths(monkeypatch, tmp_path, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    compare = importlib.import_module("whole_step_compare")
    old = {"batch": 128, "trainer": "v1"}
    before = write_run(tmp_path / "before.json", old, {"median": 1.0, "min": 0.9, "max": 1.1})
    fixed = write_run(tmp_path / "fixed.json", {**old, "lengths": "fixed"}, {"median": 1.0, "min": 0.9, "max": 1.1})
    tail = write_run(tmp_path / "tail.json", {**old, "lengths": "long_tail"}, {"median": 1.0, "min": 0.9, "max": 1.1})
    assert compare.main([str(before), str(fixed)]) == 0
    assert compare.main([str(before), str(tail)]) == 2
    assert "different jobs" in capsys.readouterr().out
