"""``verl-split advise`` keeps validation and checkpoints apart from the training step (issue 34).

On a real multi-GPU verl console log (``tests/support/data/deepseek7b_megatron_ppo_4gpu.log``: verl's published 4-GPU
PPO run of a 7B actor and critic, validation every 5 steps; see ``tests/support/data/README.md``) and on verl 0.9's
layout (validation timed after the step's total) in each format advise reads.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest
from support.advise_profiles import NEAR_LINEAR, stock_step
from support.paths import DATA
from support.verl_console import config, console_log

from verl_split.placement import Cluster
from verl_split.tools.advise import advise
from verl_split.tools.advise.logs import read_log
from verl_split.tools.advise.runs import read_run

pytestmark = pytest.mark.unit

REAL_LOG = DATA / "deepseek7b_megatron_ppo_4gpu.log"
#: The phases advise models per pool; the rest of the step (adv, what verl did not time) is its fixed part.
LANE_PHASES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor")


def independent_parse(path: Path) -> dict[int, dict[str, float]]:
    """The ``timing_s/*`` items of every step line, by a plain regex (not advise's reader)."""
    steps: dict[int, dict[str, float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        head = re.search(r"step:(\d+) - ", line)
        if head:
            items = re.findall(r"timing_s/(\w+):([-\d.]+)", line)
            steps.setdefault(int(head.group(1)), {}).update({k: float(v) for k, v in items})
    return {n: t for n, t in steps.items() if "step" in t}


def test_real_log_fixed_part_and_spread_are_without_validation():
    timings = independent_parse(REAL_LOG)
    steady = sorted(timings)[1:]  # step 1 pays start-up
    assert steady == list(range(2, 15))
    run = read_run(REAL_LOG, Cluster(1, 4))
    assert run.steps == tuple(steady)
    # The release timed validation inside the step (step 5: 216.2 s, of which 56.2 s validation).
    totals = [timings[n]["step"] - timings[n].get("testing", 0.0) for n in steady]
    fixed = [t - sum(timings[n][p] for p in LANE_PHASES) for t, n in zip(totals, steady, strict=True)]
    assert run.fixed.mean == pytest.approx(statistics.mean(fixed), abs=0.01)
    assert run.fixed.high < 0.25  # 0.18-0.19 s every step, not 56 s on the validation steps
    assert run.step.mean == pytest.approx(statistics.mean(totals), abs=0.01)
    spread = run.step.std / run.step.mean
    assert spread == pytest.approx(statistics.stdev(totals) / statistics.mean(totals), abs=1e-3)
    with_validation = [timings[n]["step"] for n in steady]
    assert spread < 0.05 < 0.10 < statistics.stdev(with_validation) / statistics.mean(with_validation)
    lanes = {"gen": ("gen",), "actor_prep": ("old_log_prob", "ref"), "critic_update": ("update_critic",)}
    for lane, parts in lanes.items():
        expected = statistics.mean(sum(timings[n][p] for p in parts) for n in steady)
        assert run.lanes[lane].mean == pytest.approx(expected, abs=0.01)


def test_real_log_validation_is_reported_on_its_own():
    run = read_run(REAL_LOG, Cluster(1, 4))
    (work,) = run.periodic
    assert (work.what, work.steps, work.every()) == ("validation", (5, 10), 5)
    assert work.seconds == {5: 56.222, 10: 53.416}
    assert all(work.inside_total.values())
    assert any("validation (timing_s/testing) on step 5, 10: taken out of the step's total" in n for n in run.notes)
    apart = run.to_json()["kept_apart"]["validation"]
    assert apart["every_steps"] == 5 and apart["seconds"]["mean"] == pytest.approx(54.819)


def test_real_log_advice_spread_is_the_training_steps():
    advice = advise([REAL_LOG], Cluster(2, 8))
    assert advice.step_cv < 0.05
    if advice.caveat is not None:  # a runner-up may still be within the real spread, never within validation's
        gap = advice.candidates[1].prediction.step_s / advice.candidates[0].prediction.step_s - 1
        assert gap < 0.05


def _v09_steps(count: int = 9, every: int = 3, validation_s: float = 30.0, saves: bool = True) -> list[dict]:
    """verl 0.9's layout: ``timing_s/testing`` after the step's timer (``trainer_base.py`` ``fit``), a
    checkpoint inside it every 4th step."""
    steps = []
    for i in range(1, count + 1):
        data = stock_step(NEAR_LINEAR, 8, scale=1.0 + (0.01 if i % 2 else -0.01))
        if i % every == 0:
            data["timing_s/testing"] = validation_s
            data["val-core/openai/gsm8k/reward/mean@1"] = 0.5
        if saves and i % 4 == 0:
            data["timing_s/save_checkpoint"] = 12.0
            data["timing_s/step"] += 12.0
        steps.append(data)
    return steps


def _write(path: Path, kind: str, steps: list[dict[str, float]]) -> Path:
    if kind == "jsonl":
        path.write_text("".join(json.dumps({"step": i, "data": d}) + "\n" for i, d in enumerate(steps, start=1)))
    elif kind == "csv":
        keys = sorted({k for d in steps for k in d})
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["_step", *keys])
            for i, data in enumerate(steps, start=1):
                writer.writerow([i, *(data.get(k, "") for k in keys)])
    else:
        path.write_text(console_log("0.9", steps, config(1, 8)))
    return path


@pytest.mark.parametrize("kind", ["console", "jsonl", "csv"])
def test_verl_09_validation_outside_the_total_and_checkpoints_inside_it(tmp_path, kind):
    steps = _v09_steps()
    if kind == "console":  # verl_console writes verl's timers; add testing and the checkpoint as 0.9 logs them
        text = _write(tmp_path / "run.log", kind, steps).read_text()
        for i, data in enumerate(steps, start=1):
            timers = [t for t in ("testing", "save_checkpoint") if f"timing_s/{t}" in data]
            extra = "".join(f" - timing_s/{t}:{data[f'timing_s/{t}']!r}" for t in timers)
            val = "val-core/x:0.5 - " if "timing_s/testing" in data else ""
            text = text.replace(f"step:{i} - ", f"step:{i} - {val}{extra[3:]} - ", 1) if extra else text
        path = tmp_path / "run.log"
        path.write_text(text)
    else:
        path = _write(tmp_path / f"run.{kind}", kind, steps)
    log = read_log(path)
    kinds = {work.what: work for work in log.periodic}
    assert kinds["validation"].steps == (3, 6, 9) and not any(kinds["validation"].inside_total.values())
    assert kinds["checkpoint save"].steps == (4, 8) and all(kinds["checkpoint save"].inside_total.values())
    run = read_run(path, Cluster(1, 8))
    plain = [stock_step(NEAR_LINEAR, 8, 1.0 + (0.01 if i % 2 else -0.01))["timing_s/step"] for i in range(2, 10)]
    assert run.step.mean == pytest.approx(statistics.mean(plain), rel=1e-6)
    assert run.fixed.high == pytest.approx(1.0 * 1.01, abs=0.02)  # adv and the rest, never the 12 s save


def test_validation_steps_without_their_timer_are_left_out(tmp_path):
    steps = _v09_steps()
    for data in steps:
        data.pop("timing_s/testing", None)
        if "val-core/openai/gsm8k/reward/mean@1" in data:
            data["timing_s/step"] += 30.0  # a release that validated inside the step without timing it
    log = read_log(_write(tmp_path / "run.jsonl", "jsonl", steps))
    assert [s["step"] for s in log.steps] == [1, 2, 4, 5, 7, 8]
    assert any("validated (val-* metrics) without a timing_s/testing" in note for note in log.notes)


def test_validation_folded_in_would_have_warned(tmp_path):
    """The same steps, once with validation named as verl names it and once hidden in an untimed rest: only
    the second inflates the spread past the runner-up's gap and warns."""
    steps = _v09_steps(count=10, every=3, validation_s=60.0, saves=False)
    hidden = []
    for data in steps:
        copy = {k: v for k, v in data.items() if not k.startswith("val-core/")}
        copy["timing_s/step"] += copy.pop("timing_s/testing", 0.0)
        hidden.append(copy)
    kept = advise([_write(tmp_path / "kept.jsonl", "jsonl", steps)], Cluster(1, 8))
    folded = advise([_write(tmp_path / "folded.jsonl", "jsonl", hidden)], Cluster(1, 8))
    assert kept.step_cv < 0.02 < 0.2 < folded.step_cv
    assert kept.model.fixed_s == pytest.approx(1.0, abs=0.02) and folded.model.fixed_s > 15.0
    # The runner-up (6:2 +defer) is 14 % slower: outside the training steps' spread, inside validation's 46 %.
    assert kept.caveat is None and "within the runs' step-to-step spread" in folded.caveat
