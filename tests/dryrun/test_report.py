"""The reports of a run (verl_split/dryrun/report.py, plots.py): the phases of a step, the phase table of
several runs, the plots, and the update table. Plain per-step metrics as verl logs them; no verl run."""

from __future__ import annotations

import pytest

from verl_split.dryrun import plots, report

pytestmark = pytest.mark.unit


def step(n: int, gen: float, prep: float, updates: float, other: float, split: bool) -> dict:
    """One step's metrics as verl (and, for a split run, verl-split) logs them; reward and adv ~ empty."""
    metrics = {
        "step": n,
        "timing_s/gen": gen,
        "timing_s/reward": 1e-5,  # verl times the empty block when there is no reward model
        "timing_s/old_log_prob": prep / 2,
        "timing_s/values": prep / 2,
        "timing_s/adv": 0.002,
        "timing_s/update_critic": updates / 2,
        "timing_s/update_actor": updates / 2,
        "timing_s/step": gen + 1e-5 + prep + 0.002 + updates + other,
    }
    if split:  # the trainer's timers measure its waits; the phases' wall times come from split/*
        metrics.update(
            {
                "timing_s/values": 0.001,
                "timing_s/update_actor": 0.001,
                "split/prep_wall_s": prep,
                "split/update_wall_s": updates,
                "split/critic_update_s": updates,
                "split/actor_update_s": updates,
            }
        )
    return metrics


COLUMNS = [
    (
        "stock",
        [step(1, 9.0, 4.0, 4.0, 1.0, False), step(2, 1.0, 4.0, 4.0, 1.0, False), step(3, 1.0, 4.0, 4.0, 1.0, False)],
    ),
    (
        "split, overlaps off",
        [step(1, 9.0, 4.0, 4.0, 1.0, True), step(2, 1.0, 4.0, 4.0, 1.0, True), step(3, 1.0, 4.0, 4.0, 3.0, True)],
    ),
    (
        "split, overlaps on",
        [step(1, 9.0, 2.0, 2.0, 1.0, True), step(2, 1.0, 2.0, 2.0, 1.0, True), step(3, 1.0, 2.0, 2.0, 1.0, True)],
    ),
]


def test_mean_phases_leaves_out_the_first_step_unless_it_is_the_only_one():
    means = report.mean_phases(COLUMNS[1][1])
    assert means["gen"] == pytest.approx(1.0)
    assert means["other"] == pytest.approx(2.0)  # (1 + 3) / 2
    assert means["step"] == pytest.approx(1.0 + 1e-5 + 4.0 + 0.002 + 4.0 + 2.0)
    assert report.mean_phases(COLUMNS[0][1][:1])["gen"] == pytest.approx(9.0)
    assert report.mean_phases([]) is None


def test_phase_table_shows_the_three_runs_side_by_side():
    lines = report.phase_table(COLUMNS).splitlines()
    assert lines[0].startswith("wall time per phase, mean of steps 2-3")
    assert [c.strip() for c in lines[1].split("|")] == ["phase", "stock", "split, overlaps off", "split, overlaps on"]
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]] for line in lines if "|" in line}
    assert "reward" not in rows  # ~0 in every run: a phase this job does not have
    assert rows["prep"] == ["4.00s", "4.00s", "2.00s"]
    assert rows["updates"] == ["4.00s", "4.00s", "2.00s"]
    assert rows["adv"] == ["0.00s", "0.00s", "0.00s"]
    assert rows["other"] == ["1.00s", "2.00s", "1.00s"]
    assert rows["step"] == ["10.00s", "11.00s", "6.00s"]
    table_rows = [line.split("|")[0].strip() for line in lines if "|" in line]
    assert table_rows == ["phase", "gen", "prep", "adv", "updates", "other", "step"]  # the whole step last
    speedup = next(line for line in lines if line.startswith("speed-up"))
    assert (
        speedup
        == "speed-up of the whole step, split, overlaps on: 1.67x against stock, 1.83x against split, overlaps off"
    )


def test_phase_table_of_one_single_step_run():
    table = report.phase_table([("split", COLUMNS[2][1][:1])])
    assert "step 1, the only one" in table
    assert "speed-up" not in table
    assert table.splitlines()[-3].split("|")[1].strip() == "14.00s"  # the whole step, step 1 included


def test_plot_step_times_writes_a_png(tmp_path):
    path = tmp_path / "step_times.png"
    assert plots.plot_step_times(COLUMNS, path)  # step 1 (16 s) is clipped at 1.3 x the later 14 s
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
    assert not plots.plot_step_times([("split", COLUMNS[2][1][:1])], tmp_path / "one.png")  # nothing to clip


def test_the_step_plot_leaves_step_1s_start_up_out_of_its_scale():
    """The demo's step 1 pays ~6 s of start-up against ~0.5 s steps: the axis follows steps 2..N."""
    assert plots.step_scale({1: [6.0, 6.2], 2: [0.5, 0.45], 3: [0.6, 0.4]}) == pytest.approx(1.3 * 0.6)
    assert plots.step_scale({1: [0.7], 2: [0.6]}) is None  # step 1 within the later steps' scale: not clipped
    assert plots.step_scale({1: [6.0]}) is None


def test_the_update_table_shows_a_deferred_critic_update():
    """A step whose critic update ran on into the next: its wall is what the step waited for, plus what hid."""
    deferred = {
        "step": 1,
        "split/critic_update_s": 3.0,
        "split/actor_update_s": 1.0,
        "split/update_wall_s": 3.0,
        "split/critic_update_deferred": 1.0,
        "split/critic_update_hidden_s": 1.5,
        "split/critic_join_wait_s": 0.5,
        "timing_s/update_critic": 0.01,
        "timing_s/update_actor": 1.0,
    }
    rows = report.step_rows([deferred])
    assert rows[0]["wall_s"] == pytest.approx(1.01) and rows[0]["speedup"] == pytest.approx(4.0 / 1.01)
    table = report.summary_table(rows)
    assert "hidden" in table and "1.50s" in table and "0.50s" in table
    # Named by what they divide: a deferred step's sum/wall (4.0 / 1.01) above its sum/max (4 / 3) is no puzzle.
    assert [cell.strip() for cell in table.splitlines()[0].split("|")[5:7]] == ["sum/wall", "sum/max"]
    assert "a step whose critic update was deferred can pass it, its wall no longer holds that update" in " ".join(
        table.splitlines()
    )
    assert "critic pool gen" not in table  # no shared rollout logged: no such columns
    line = report.deferral_line(rows + report.step_rows([{**deferred, "step": 2, "split/critic_update_deferred": 0}]))
    assert line.startswith("the critic's update deferred in step 1: of its 3.00 s (1.00 s for the actor's), 1.50 s")
    assert report.deferral_line(report.step_rows([{**deferred, "split/critic_update_deferred": 0}])) is None


def test_the_update_table_shows_shared_rollouts_late_join_when_logged():
    base = {"split/critic_update_s": 3.0, "split/actor_update_s": 1.0, "split/update_wall_s": 3.0}
    base.update({"split/critic_update_deferred": 1.0, "timing_s/update_critic": 0.01, "timing_s/update_actor": 1.0})
    joined = {**base, "step": 2, "split/critic_pool_rollout_share": 0.25, "split/critic_pool_joined": 1.0}
    joined.update({"split/critic_pool_join_s": 0.42, "split/shared_rollout_saved_estimate_s": 0.3})
    never = {**base, "step": 3, "split/critic_pool_rollout_share": 0.0, "split/critic_pool_joined": 0.0}
    never["split/shared_rollout_saved_estimate_s"] = 0.0
    rows = report.step_rows([joined, never])
    assert rows[0]["share"] == 0.25 and rows[0]["join_s"] == 0.42 and "join_s" not in rows[1]
    lines = report.summary_table(rows).splitlines()
    assert lines[0].split("|")[-3:] == [" critic pool gen ", " joined at ", "   saved"]
    assert [c.strip() for c in lines[2].split("|")[-3:]] == ["25 %", "0.42s", "0.30s"]
    assert [c.strip() for c in lines[3].split("|")[-3:]] == ["0 %", "-", "0.00s"]  # never joined
    assert "joined at = seconds after the step's first request" in " ".join(lines[4:])


def test_the_overlaps_off_runs_wall_is_named_as_another_runs():
    """The overlaps-off run's update wall can be shorter than this run's critic update: the table says whose it is."""
    step = {"step": 2, "split/critic_update_s": 0.6, "split/actor_update_s": 0.12, "split/update_wall_s": 0.6}
    rows = report.step_rows([step])
    lines = report.summary_table(rows, report.step_rows([{**step, "split/update_wall_s": 0.45}])).splitlines()
    assert lines[0].split("|")[-1].strip() == "overlaps-off run's wall" and lines[2].endswith("0.45s")
    assert any(line.startswith("overlaps-off run's wall = the update phase's wall in another run") for line in lines)
    assert max(len(line) for line in lines) <= max(len(lines[0]), 100)  # the notes wrapped to the table's width
