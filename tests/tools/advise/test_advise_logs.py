"""``verl-split advise`` reads the logs verl users have (issue 24): console output of verl 0.1 to 0.9 (Ray's
prefixes and colours, cut and interleaved lines, bytes that are not UTF-8), JSONL, CSV exports, told by content.

The console logs are written by ``verl_console`` from each release's logger code; the lanes they carry come
from ``test_advise_profiles``' synthetic profiles. Not measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.advise_profiles import SUBLINEAR, lane, split_step, stock_step, write_run
from support.verl_console import CYAN, RESET, STYLES, config, console_log, prefix, step_line

from verl_split.placement import Cluster
from verl_split.tools.advise import advise
from verl_split.tools.advise.logs import CONSOLE, CSV, JSONL, read_log
from verl_split.tools.advise.runs import read_run
from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

CLUSTER = Cluster(1, 8)


def stock_steps(n: int = 8, count: int = 4) -> list[dict[str, float]]:
    return [stock_step(SUBLINEAR, n, scale=1.0 + 0.01 * i) for i in range(count)]


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# --------------------------------------------------------------------------- console output of four releases


@pytest.mark.parametrize("version", ["0.3", "0.7", "0.9"])
def test_console_of_each_release_gives_the_lanes_of_its_steps(tmp_path, version):
    steps = stock_steps()
    path = write(tmp_path / "main_ppo.log", console_log(version, steps, config(1, 8)))
    run = read_run(path, CLUSTER)
    assert run.format == CONSOLE and run.steps == (2, 3, 4)  # step 1 left out; step 0 is validation only
    places = 1e-3 if STYLES[version].three_decimals else 1e-9  # 0.1-0.4 print three decimals
    expected = [lane(SUBLINEAR, "gen", 8) * (1.0 + 0.01 * i) for i in (1, 2, 3)]
    assert run.lanes["gen"].mean == pytest.approx(sum(expected) / 3, abs=places)
    assert run.lanes["actor_prep"].mean == pytest.approx(lane(SUBLINEAR, "actor_prep", 8) * 1.02, abs=2 * places)
    assert run.fixed.mean == pytest.approx(1.0, abs=10 * places)  # adv and the rest do not scale
    assert (run.actor_gpus, run.colocated, run.cluster) == (8, True, Cluster(1, 8))


def test_verl_0_1_timing_names_steps_from_0_and_no_step_total(tmp_path):
    path = write(tmp_path / "v01.log", console_log("0.1", stock_steps(), config(1, 8)))
    log = read_log(path)
    assert [s["step"] for s in log.steps] == [0, 1, 2, 3]  # verl 0.1 logs the first step as step 0
    first = log.steps[1]
    assert "timing/gen" in first and first["timing_s/gen"] == first["timing/gen"]
    phases = ("gen", "ref", "values", "adv", "update_critic", "update_actor")
    assert first["timing_s/step"] == pytest.approx(sum(first[f"timing_s/{p}"] for p in phases))
    assert any("no step total" in note and "sum of its timed phases" in note for note in log.notes)
    assert any("old_log_prob is not timed apart" in note for note in log.notes)
    run = read_run(path, CLUSTER)
    assert run.steps == (1, 2, 3)
    # old_log_prob sits inside generation there; the actor's preparation is ref alone.
    gen = (lane(SUBLINEAR, "gen", 8) + 0.6 * lane(SUBLINEAR, "actor_prep", 8)) * 1.02
    assert run.lanes["gen"].mean == pytest.approx(gen, abs=2e-3)
    assert run.lanes["actor_prep"].mean == pytest.approx(0.4 * lane(SUBLINEAR, "actor_prep", 8) * 1.02, abs=2e-3)


def test_numpy_2_reprs_and_flags_are_numbers(tmp_path):
    line = step_line(STYLES["0.9"], 5, stock_step(SUBLINEAR, 8))
    assert "critic/vf_loss:np.float64(0.0871)" in line
    text = prefix(STYLES["0.9"]) + line + " - num_turns/min:np.int32(2) - x/flag:True - y/z:nan\n"
    log = read_log(write(tmp_path / "np.log", text))
    step = log.steps[0]
    assert step["critic/vf_loss"] == 0.0871 and step["num_turns/min"] == 2.0 and step["x/flag"] == 1.0


def test_ray_prefixes_with_ip_no_colour_and_validation_only_lines(tmp_path):
    steps = stock_steps()
    lines = ["(TaskRunner pid=77, ip=10.0.0.3) step:0 - val-core/openai/gsm8k/reward/mean@1:0.25"]
    lines += [
        f"(TaskRunner pid=77, ip=10.0.0.3) {step_line(STYLES['0.7'], i + 1, s)} [repeated 2x across cluster]"
        for i, s in enumerate(steps)
    ]
    log = read_log(write(tmp_path / "ip.log", "\n".join(lines)))
    assert [s["step"] for s in log.steps] == [1, 2, 3, 4]
    assert log.steps[0]["timing_s/step"] == pytest.approx(steps[0]["timing_s/step"])


# --------------------------------------------------------------------------- cut, interleaved, not UTF-8


def test_interleaved_cut_and_non_utf8_lines(tmp_path):
    style = STYLES["0.9"]
    own, other = prefix(style), f"{CYAN}(WorkerDict pid=9){RESET} "
    steps = stock_steps(count=5)
    lines = [step_line(style, i + 1, s) for i, s in enumerate(steps)]
    cut_at = lines[1].index("timing_s/update_actor:") + len("timing_s/upd")
    text = "\n".join(
        [
            own + lines[0],
            # a tqdm bar's carriage return, then the step line on the same physical line
            own + "Training Progress:  40%|####      | 2/5 [00:20<00:30]\r" + lines[1][:cut_at],
            other + "W1124 14:58:53 torch/fx/_symbolic_trace.py:56] is_fx_tracing \xe9\xe8",
            own + lines[1][cut_at:],  # the rest of step 2, after another process's line
            other + "Using blocking ray.get inside async actor.",
            own + lines[2] + f"{CYAN}(WorkerDict pid=9){RESET} glued output",  # no newline before the next
            own + lines[3],
            own + lines[4][: lines[4].index("timing_s/step:") + len("timing_s/st")],  # killed mid-print
        ]
    )
    raw = text.encode().replace("\xe9\xe8".encode(), b"\xe9\xff\xfe")  # Latin-1 and stray bytes
    log = read_log(write(tmp_path / "mixed.log", raw))
    assert [s["step"] for s in log.steps] == [1, 2, 3, 4]
    assert log.steps[1]["timing_s/update_actor"] == pytest.approx(steps[1]["timing_s/update_actor"])
    assert log.steps[2]["timing_s/step"] == pytest.approx(steps[2]["timing_s/step"])
    notes = " | ".join(log.notes)
    assert "not UTF-8" in notes and "joined with their rest" in notes
    assert "step 5 left out: no timing_s/step" in notes and "step 3: its line is cut" in notes


# --------------------------------------------------------------------------- CSV exports, JSONL


def test_wandb_history_csv_with_empty_cells(tmp_path):
    steps = stock_steps()
    keys = sorted({k for s in steps for k in s})
    rows = ["_step,_runtime,_timestamp," + ",".join(keys)]
    rows.append("0,3.1,1714550000,," + "," * (len(keys) - 2) + "")  # a validation row: every metric empty
    for i, s in enumerate(steps, start=1):
        rows.append(f"{i},{10.0 * i},{1714550000 + i}," + ",".join(repr(s[k]) for k in keys))
    rows.append(f"3,35.0,1714550040,{','.join('' for _ in keys)}")  # an extra row of step 3: merged
    run = read_run(write(tmp_path / "wandb.csv", "\n".join(rows) + "\n"), CLUSTER)
    assert run.format == CSV and run.steps == (2, 3, 4)
    assert run.lanes["critic_update"].mean == pytest.approx(lane(SUBLINEAR, "critic_update", 8) * 1.02)


def test_wandb_chart_export_and_mlflow_history(tmp_path):
    steps = stock_steps()
    keys = ["timing_s/gen", "timing_s/update_actor", "timing_s/step"]
    header = ["Step"] + [f"ppo-run-3 - {k}{suffix}" for k in keys for suffix in ("", "__MIN", "__MAX")]
    rows = [",".join(header)]
    for i, s in enumerate(steps, start=1):
        rows.append(",".join([str(i)] + [repr(s[k]) for k in keys for _ in range(3)]))
    log = read_log(write(tmp_path / "chart.csv", "\n".join(rows)))
    assert log.format == CSV and set(log.steps[0]) == {"step", *keys}
    long = ["key,value,step,timestamp"] + [f"{k},{s[k]!r},{i},0" for i, s in enumerate(steps, 1) for k in keys]
    log = read_log(write(tmp_path / "mlflow.csv", "\n".join(long)))
    assert log.steps[2]["timing_s/gen"] == steps[2]["timing_s/gen"]


def test_a_jsonl_cut_at_its_last_line_is_read_and_said(tmp_path):
    path = write_run(tmp_path / "run.jsonl", stock_steps())
    path.write_text(path.read_text() + '{"step": 5, "data": {"timing_s/gen": 1')
    log = read_log(path)
    assert log.format == JSONL and [s["step"] for s in log.steps] == [1, 2, 3, 4]
    assert any("line 6 cut" in note for note in log.notes)


# --------------------------------------------------------------------------- a mixed set


def test_a_console_log_and_a_jsonl_of_two_layouts(tmp_path, capsys):
    stock = write(tmp_path / "stock.log", console_log("0.9", stock_steps(), config(1, 8)))
    split = write_run(tmp_path / "split.jsonl", [split_step(SUBLINEAR, 4, 4) for _ in range(4)])
    advice = advise([stock, split], CLUSTER)
    assert [run.format for run in advice.runs] == [CONSOLE, JSONL]
    assert advice.model.lanes["gen"].fit == "fitted" and advice.model.lanes["gen"].sizes == (4, 8)
    assert main(["advise", "--verbose", str(stock), str(split), "--nnodes", "1", "--n-gpus-per-node", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "read as verl console output; layout: stock (no split/* pool sizes): one pool of every GPU, the " in out
    assert "read as JSONL (verl's file logger); layout: verl-split's split/actor_pool_gpus" in out


# --------------------------------------------------------------------------- bad inputs: one line, exit 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        (b"\n \n", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "none of the formats advise reads"),
        ("just some text\nand more\n", "none of the formats advise reads"),
        (console_log("0.9", [], config(1, 8)).replace("step:0 - ", ""), "console output but has no 'step:N"),
        ("(TaskRunner pid=1) step:0 - val-core/openai/gsm8k/reward/mean@1:0.5\n", "no phase timings"),
        ("_step,actor/loss\n1,0.5\n2,0.4\n", "no phase timings"),
        ('{"step": 1, "data": {"timing_s/gen": 1.0, "timing_s/st', "no whole step|empty"),
        ("(TaskRunner pid=1) step:1 - timing_s/gen:2.0 - timing_s/st\n", "no whole step|no phase"),
    ],
)
def test_bad_inputs_are_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = write(tmp_path / "run.log", content)
    code = main(["advise", "--verbose", str(path), "--nnodes", "1", "--n-gpus-per-node", "8"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"verl-split advise: {path}") and err.count("\n") == 1 and "Traceback" not in err
    assert any(part in err for part in message.split("|")), err


def test_json_names_the_format_and_the_layouts_source(tmp_path, capsys):
    path = write(tmp_path / "stock.log", console_log("0.7", stock_steps(n=2), config(1, 2)))
    assert main(["advise", "--verbose", str(path), "--nnodes", "2", "--n-gpus-per-node", "8", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["format"] == CONSOLE and run["cluster"] == {"nnodes": 1, "n_gpus_per_node": 2}
    assert run["actor_pool_gpus"] == 2 and "the config printed at start-up" in run["layout_source"]
    assert any("advising for" in note for note in run["notes"])


def test_a_log_without_ray_prefixes_saved_with_crlf(tmp_path):
    """verl run without Ray's log prefixes (a plain python trainer's output), saved on Windows."""
    text = console_log("0.3", stock_steps(), config(2, 4), colour=False)
    plain = "\r\n".join(line.split(") ", 1)[1] if line.startswith("(") else line for line in text.splitlines())
    log = read_log(write(tmp_path / "plain.log", plain))
    assert [s["step"] for s in log.steps] == [1, 2, 3, 4] and log.config["trainer"]["nnodes"] == 2


def test_a_csv_without_the_critic_columns_says_so(tmp_path):
    keys = ["timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/step"]
    rows = ["_step," + ",".join(keys)] + [
        f"{i}," + ",".join(repr(s[k]) for k in keys) for i, s in enumerate(stock_steps(), 1)
    ]
    run = read_run(write(tmp_path / "few.csv", "\n".join(rows)), CLUSTER)
    assert set(run.lanes) == {"gen", "actor_prep", "actor_update"}
    assert any("no values, critic update column(s)" in note for note in run.notes)
