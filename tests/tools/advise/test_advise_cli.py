"""``verl-split advise`` through the command's main function: the report, ``--json``, ``--plot``, bad input."""

from __future__ import annotations

import json

import pytest
from support.advise_profiles import NEAR_LINEAR, SUBLINEAR, run_file, stock_step, write_run

from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

CLUSTER_ARGS = ["--nnodes", "1", "--n-gpus-per-node", "8"]


def advise(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["advise", "--verbose", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_one_stock_run_assumes_linear_scaling_and_names_the_run_to_add(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", SUBLINEAR, n=8)
    code, out, err = advise(capsys, str(stock), *CLUSTER_ARGS)
    assert code == 0, err
    assert "linear scaling ASSUMED (measured on 8 GPUs only)" in out
    assert "recommended: split_placement.placement=all" in out  # linear scaling never favours a split
    assert "to fit instead of assume: a split run" in out and "VERL_SPLIT_OVERLAP=off" in out
    assert "step 1 left out" in out
    assert max(len(line) for line in out.splitlines() if not line.startswith(str(tmp_path))) <= 110


def test_stock_and_split_runs_fit_and_recommend_a_split(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", SUBLINEAR, n=8)
    split = run_file(tmp_path / "split.jsonl", SUBLINEAR, actor_n=4, critic_n=4)
    code, out, _ = advise(capsys, str(stock), str(split), *CLUSTER_ARGS)
    assert code == 0
    assert "fitted to 4, 8 GPUs" in out and "ASSUMED" not in out
    table = out[out.index("predicted step time") : out.index("recommended:")]
    plain = [line.split()[1] for line in table.splitlines() if line[:5].strip().isdigit() and "+" not in line]
    assert plain[0] == "halves"  # the fastest split with the updates and prep overlaps
    # With the critic's update deferred, more GPUs go to the actor side: it hides behind the next generation.
    assert "recommended: split_placement.placement=5:3 with defer_critic in VERL_SPLIT_OVERLAP" in out
    assert "VERL_SPLIT_PLACEMENT=5:3 VERL_SPLIT_OVERLAP=updates,prep,defer_critic python" in out


def test_json_shape(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", NEAR_LINEAR, n=8)
    split = run_file(tmp_path / "split.jsonl", NEAR_LINEAR, actor_n=6, critic_n=2)
    code, out, _ = advise(capsys, str(stock), str(split), *CLUSTER_ARGS, "--json")
    assert code == 0
    result = json.loads(out)
    assert set(result) >= {"candidates", "recommended", "model", "runs", "assumptions", "next_run", "cluster"}
    first = result["candidates"][0]
    assert set(first) >= {"placement", "predicted_step_s", "speedup_vs_stock", "idle_share", "actor_pool_gpus"}
    assert result["recommended"]["placement"] == first["placement"] == "all"
    assert result["recommended"]["reason"].endswith("during generation).")
    steps = [c["predicted_step_s"] for c in result["candidates"]]
    assert steps == sorted(steps, key=lambda s: round(s, 9))  # ties keep the candidates' order
    plain = [c["placement"] for c in result["candidates"] if not c["deferred_critic"]]
    assert plain[:2] == ["all", "halves"]
    assert result["runs"][1]["layout"] == "split" and result["runs"][1]["critic_pool_gpus"] == 2
    assert result["runs"][0]["step_s"]["steps"] == 4  # step 1 left out
    assert result["model"]["lanes"]["gen"]["fit"] == "fitted"


def test_plot(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", SUBLINEAR, n=16)
    plot = tmp_path / "advise.png"
    code, out, _ = advise(capsys, str(stock), "--nnodes", "2", "--n-gpus-per-node", "8", "--plot", str(plot))
    assert code == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {plot}" in out


def test_a_run_without_a_critic_keeps_stock(tmp_path, capsys):
    data = {k: v for k, v in stock_step(SUBLINEAR, 8).items() if k not in ("timing_s/values", "timing_s/update_critic")}
    path = write_run(tmp_path / "grpo.jsonl", [data, data, data])
    code, out, _ = advise(capsys, str(path), *CLUSTER_ARGS, "--json")
    result = json.loads(out)
    assert code == 0 and [c["placement"] for c in result["candidates"]] == ["all"]
    assert "no critic" in result["recommended"]["reason"]


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (lambda d: (d / "x.jsonl").write_text("hello\n"), ["x.jsonl"], "none of the formats advise reads"),
        (lambda d: None, ["missing.jsonl"], "no such file"),
        (lambda d: (d / "x.jsonl").write_text('{"step": 1, "data": {"a": 1}}\n'), ["x.jsonl"], "no phase timings"),
        (
            lambda d: run_file(d / "x.jsonl", SUBLINEAR, actor_n=6, critic_n=2),
            ["x.jsonl", "--nnodes", "1", "--n-gpus-per-node", "4"],
            "more than the cluster",
        ),
        (lambda d: run_file(d / "x.jsonl", SUBLINEAR, n=8), ["x.jsonl", "--nnodes", "0"], "nnodes must be"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, setup, args, message):
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    if "--nnodes" not in args:
        args = [*args, *CLUSTER_ARGS]
    elif "--n-gpus-per-node" not in args:
        args = [*args, "--n-gpus-per-node", "8"]
    code, out, err = advise(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("verl-split advise: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cluster_shape_is_required(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["advise", "--verbose", "run.jsonl"])
    assert caught.value.code == 2
    assert "--nnodes" in capsys.readouterr().err


def test_listed_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "advise" in capsys.readouterr().out


def test_one_split_run_names_a_stock_run_to_add(tmp_path, capsys):
    split = run_file(tmp_path / "split.jsonl", SUBLINEAR, actor_n=4, critic_n=4)
    code, out, _ = advise(capsys, str(split), *CLUSTER_ARGS, "--json")
    result = json.loads(out)
    assert code == 0
    assert "a stock run of the same job on all 8 GPUs" in result["next_run"]
    assert any(line.startswith("linear scaling of generation") for line in result["assumptions"])
    assert {lane["fit"] for lane in result["model"]["lanes"].values()} == {"linear scaling assumed"}
