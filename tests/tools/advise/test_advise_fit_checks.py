"""``verl-split advise`` where users need it most (issue 54): scaling a job up to a cluster where stock's batch does
not fit, a log whose own heading gives its GPUs, two logs of different jobs, and the three lines it ends on.

The logs are synthetic: verl's console output as ``support.verl_console`` writes it, with a known profile.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.advise_profiles import NEAR_LINEAR, stock_step
from support.verl_console import config, console_log

from verl_split.placement import Cluster
from verl_split.tools.advise import advise
from verl_split.tools.advise.runs import AdviseError
from verl_split.tools.advise.summary import confidence
from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
#: verl-data's logs open like this (``eric-haibin-lin/verl-data``, ``gsm8k/Qwen2.5-0.5B-...-0.538.log``): the
#: commit, then the command, an example script given the overrides as one quoted argument.
HEADING = (
    "commit:\n50ac7252f97cf39997344237bca74162b2dc6d79\n\ncommand:\n"
    'bash examples/ppo_trainer/run_gemma.sh "trainer.n_gpus_per_node=1 '
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1 trainer.logger=['console'] "
    "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct "
    "data.train_batch_size=256 data.max_prompt_length=512 data.max_response_length=256 "
    'actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size=2"\n\n'
)


def steps(n_gpus: int) -> list[dict[str, float]]:
    return [stock_step(NEAR_LINEAR, n_gpus, 1.0 + 0.01 * (i % 2)) for i in range(4)]


def eight_gpu_log(path: Path) -> Path:
    """A stock run of a 7B PPO job on 1 x 8 GPUs: a batch of 256 in micro-batches of 16 per GPU."""
    cfg = config(1, 8)
    cfg["actor_rollout_ref"]["actor"].update(ppo_mini_batch_size=256, ppo_micro_batch_size_per_gpu=16)
    cfg["actor_rollout_ref"]["model"]["path"] = "deepseek-ai/deepseek-llm-7b-chat"
    path.write_text(console_log("0.9", steps(8), cfg))
    return path


def one_gpu_log(path: Path, prompt: int, response: int, heading: bool = False) -> Path:
    """A stock run on 1 GPU: its config printed (``heading``: cut, its GPUs in verl-data's heading instead)."""
    if heading:
        path.write_text(HEADING + console_log("0.1", steps(1), None))
        return path
    cfg = config(1, 1)
    cfg["data"].update(max_prompt_length=prompt, max_response_length=response)
    path.write_text(console_log("0.1", steps(1), cfg))
    return path


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["advise", *args])
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- stock does not fit the cluster


def test_an_8_gpu_log_advised_for_4x8_shows_na_and_the_micro_batch_that_lets_stock_fit(tmp_path, capsys):
    log = eight_gpu_log(tmp_path / "stock_8gpu.log")
    advice = advise([log], Cluster(4, 8))
    # 256 samples over 32 ranks are 8 a rank: not whole micro-batches of 16. No baseline, so no row has a speed-up.
    assert "all" in dict(advice.rejected)
    assert all(c.speedup_vs_stock is None for c in advice.candidates)
    unfit = advice.stock_fit
    assert unfit is not None and dict(unfit.micro) == {MICRO: 8}
    assert (MICRO, (8,)) in unfit.nearest
    # The model predicts stock with micro-batches of 8, the same optimisation: on near-linear scaling it wins.
    assert unfit.predicted_step_s is not None and unfit.predicted_step_s < advice.recommended.prediction.step_s

    code, out, _ = run_cli(capsys, str(log), "--nnodes", "4", "--n-gpus-per-node", "8")
    assert code == 0
    table = out[out.index("predicted step time") : out.index("recommended:")]
    rows = [line for line in table.splitlines() if line[:5].strip().isdigit()]
    assert rows and all(" n/a " in row for row in rows) and "1.00x" not in table
    assert "check: stock (placement all) does not fit GPUs 0-31 on 4 nodes of 8" in out
    assert f"Stock fits with {MICRO}=8" in " ".join(out.split())
    summary = " ".join(out[out.index("\nrecommendation: ") :].split())
    assert summary.startswith(f"recommendation: stock verl with {MICRO}=8")

    code, out, _ = run_cli(capsys, str(log), "--nnodes", "4", "--n-gpus-per-node", "8", "--json")
    report = json.loads(out)
    assert all(c["speedup_vs_stock"] is None for c in report["candidates"])
    assert report["stock_fit"]["micro_batches_that_fit"] == {MICRO: 8}
    assert report["confidence"]["level"] == "low" and report["summary"][0].startswith("recommendation: stock verl")


def test_where_only_the_batch_fits_stock_it_is_named_and_never_predicted(tmp_path):
    # 3 nodes of 8: 256 rows do not split over 24 ranks; no micro-batch helps, the train batch must change.
    advice = advise([eight_gpu_log(tmp_path / "stock_8gpu.log")], Cluster(3, 8))
    unfit = advice.stock_fit
    assert unfit is not None and unfit.micro == () and unfit.predicted_step_s is None
    assert "data.train_batch_size=" in unfit.nearest_text()
    assert all(c.speedup_vs_stock is None for c in advice.candidates)


def test_stock_that_fits_keeps_its_baseline(tmp_path):
    advice = advise([eight_gpu_log(tmp_path / "stock_8gpu.log")], Cluster(2, 8))  # 256 / 16 = 16: whole
    assert advice.stock_fit is None
    assert next(c for c in advice.candidates if c.placement == "all").speedup_vs_stock == 1.0


# --------------------------------------------------------------------------- the cluster from the log's heading


def test_a_log_whose_command_heading_gives_its_gpus_trained_on_them_not_the_flags(tmp_path):
    log = one_gpu_log(tmp_path / "headed.log", 512, 256, heading=True)
    run = advise([log], Cluster(2, 8)).runs[0]
    assert (run.actor_gpus, run.cluster) == (1, Cluster(1, 1))  # trainer.nnodes unset: verl's default, one node
    assert "overrides" in run.cluster_source and "verl's default, 1" in run.cluster_source
    assert run.job_config["data"]["max_response_length"] == 256  # the quoted argument's overrides


# --------------------------------------------------------------------------- two logs of different jobs


def test_two_logs_of_different_jobs_are_refused_or_flagged_when_asked(tmp_path, capsys):
    headed = one_gpu_log(tmp_path / "headed.log", 512, 256, heading=True)
    other = one_gpu_log(tmp_path / "other.log", 1024, 512)
    with pytest.raises(AdviseError, match=r"different jobs \(prompt length: 512 .* vs 1024"):
        advise([headed, other], Cluster(2, 8))

    code, out, err = run_cli(capsys, str(headed), str(other), "--nnodes", "2", "--n-gpus-per-node", "8")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--different-jobs" in err

    advice = advise([headed, other], Cluster(2, 8), allow_different_jobs=True)
    assert any(flag.startswith("the runs are of different jobs") for flag in advice.flags)
    assert confidence(advice)[0] == "low"


def test_a_run_whose_gpus_only_the_flags_give_is_flagged_when_the_fit_rests_on_it(tmp_path, capsys):
    bare = tmp_path / "bare.log"
    bare.write_text(console_log("0.1", steps(1), None))  # no config, no command: 16 GPUs from the flags
    other = one_gpu_log(tmp_path / "other.log", 512, 512)
    advice = advise([bare, other], Cluster(2, 8))
    flags = [flag for flag in advice.flags if "taken as the flags' 16" in flag]
    assert len(flags) == 1 and "the scaling rests on that assumption" in flags[0]
    assert any("say nothing of the job" in flag or "says nothing of the job" in flag for flag in advice.flags)
    assert confidence(advice)[0] == "medium"


# --------------------------------------------------------------------------- short by default, summary last


def test_the_report_is_short_by_default_and_ends_on_its_three_items(tmp_path, capsys):
    log = eight_gpu_log(tmp_path / "stock_8gpu.log")
    _, short, _ = run_cli(capsys, str(log), "--nnodes", "1", "--n-gpus-per-node", "8")
    _, verbose, _ = run_cli(capsys, str(log), "--nnodes", "1", "--n-gpus-per-node", "8", "--verbose")
    assert len(short.splitlines()) < len(verbose.splitlines()) and "cost model" not in short
    for report in (short, verbose):
        items = [line.split(":")[0] for line in report.splitlines() if line and not line.startswith(" ")][-3:]
        assert items == ["recommendation", "expected", "next run"]
    assert "confidence low (scaling assumed from one pool size)" in " ".join(short.split())
