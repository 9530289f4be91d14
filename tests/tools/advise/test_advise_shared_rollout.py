"""``verl-split advise`` and shared rollout (issue 15): the ``+shared`` variant of every split.

Generation on all A + C GPUs by the generation lane's model, plus the weight push and the critic's offload.
Synthetic profiles only (``test_advise_profiles``): none of this is a GPU measurement.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from support.advise_profiles import SUBLINEAR, Profile, lane, run_file, split_step, write_run

from verl_split.placement import Cluster
from verl_split.tools.advise import advise
from verl_split.tools.advise.candidates import rank
from verl_split.tools.advise.model import FIT_AMDAHL, CostModel, LaneModel, predict
from verl_split.tools.advise.reasons import _shared_reason
from verl_split.tools.advise.runs import read_run
from verl_split.tools.advise.variants import ASSUMED, GIVEN, MEASURED, SharedRolloutCosts
from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

CLUSTER = Cluster(1, 8)
CLUSTER_ARGS = ["--nnodes", "1", "--n-gpus-per-node", "8"]
#: Generation dominates the step and scales well: the critic pool's GPUs are worth generating on.
GEN_DOMINATED: Profile = {**SUBLINEAR, "gen": (1.0, 160.0)}
#: Generation is a sliver of the step: sharing it cannot pay for the push.
TINY_GEN: Profile = {**SUBLINEAR, "gen": (0.1, 1.0)}


def costs(push_s: float | None = 0.0, offload_s: float = 0.0) -> SharedRolloutCosts:
    basis = None if push_s is None else GIVEN
    return SharedRolloutCosts(push_s, basis, "test", offload_s, GIVEN, "test")


def model_of(gen: tuple[float, float]) -> CostModel:
    lanes = {name: LaneModel(name, *SUBLINEAR[name], FIT_AMDAHL, ()) for name in SUBLINEAR}
    lanes["gen"] = LaneModel("gen", *gen, FIT_AMDAHL, ())
    return CostModel(lanes=lanes, fixed_s=1.0)


def shared_run(path: Path, profile: Profile, actor_n: int, critic_n: int, push: float, steps: int = 5) -> Path:
    """A split run with shared rollout: generation on all its GPUs, the push timed outside the phases."""
    records = []
    for i in range(1, steps + 1):
        data = split_step(profile, actor_n, critic_n)
        gen = lane(profile, "gen", actor_n + critic_n)
        data["timing_s/step"] += gen - data["timing_s/gen"] + push
        data["timing_s/gen"] = gen
        data["split/critic_pool_rollout_share"] = critic_n / (actor_n + critic_n)
        data["split/shared_rollout_sync_s"] = push * (1.1 if i % 2 else 0.9)
        records.append(data)
    return write_run(path, records)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["advise", *args])
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("gen", [(0.0, 16.0), (8.0, 16.0), (1.0, 160.0), (30.0, 1.0), (0.1, 1.0)])
def test_the_saving_never_exceeds_gen_times_the_critic_share(gen):
    model = model_of(gen)
    for a, c in itertools.product(range(1, 16), repeat=2):
        plain = predict(model, a, c, colocated=False)
        shared = predict(model, a, c, colocated=False, shared=costs())
        saving = plain.step_s - shared.step_s
        bound = plain.phases["gen"] * c / (a + c)
        assert -1e-9 <= saving <= bound + 1e-9
        if gen[0] == 0.0:  # linear scaling: the whole bound; a serial part (the long tail) keeps some back
            assert saving == pytest.approx(bound)
        else:
            assert saving < bound
        assert shared.phases["prep"] == plain.phases["prep"] and shared.phases["updates"] == plain.phases["updates"]


def test_the_push_and_the_offload_add_to_the_step():
    model = model_of((1.0, 160.0))
    free = predict(model, 4, 4, colocated=False, shared=costs(0.0))
    paid = predict(model, 4, 4, colocated=False, shared=costs(1.5, offload_s=0.5))
    assert paid.step_s == pytest.approx(free.step_s + 2.0)
    assert paid.phases["other"] == pytest.approx(1.0 + 2.0)  # the fixed part and the push and offload
    assert paid.phases["gen"] == pytest.approx(1.0 + 160.0 / 8)
    # Both pools generate: the critic pool's busy time has generation and the offload in it.
    critic_busy = paid.phases["gen"] + 0.5 + paid.lanes["critic_prep"] + paid.lanes["critic_update"]
    assert paid.idle_share["critic"] == pytest.approx(1 - critic_busy / paid.step_s)
    assert predict(model, 8, 8, colocated=True, shared=costs(1.5)).shared is None  # one pool: nothing to share


def test_an_unknown_push_is_not_ranked_and_says_what_would_win():
    candidates, _ = rank(model_of((1.0, 160.0)), CLUSTER, shared=costs(None))
    ranked = [c for c in candidates if c.ranked]
    unranked = [c for c in candidates if not c.ranked]
    assert candidates == ranked + unranked  # the unranked last
    assert not any(c.shared_rollout for c in ranked)
    assert {c.placement for c in unranked} == {c.placement for c in ranked if c.is_split}


def test_the_critic_pool_must_hold_whole_replicas():
    # The planner's rule (tests/placement/test_shared_rollout_plan.py), through the ranking: replicas of 2 on 2 x 8.
    # The planner takes 1:7 (its actor pool, 1 GPU per node, holds
    # a replica across the nodes), but the critic pool's 7 GPUs per node hold no whole replicas.
    candidates, rejected = rank(model_of((1.0, 160.0)), Cluster(2, 8), rollout_tp=2, shared=costs())
    assert "not a whole number of rollout replicas of 2 GPUs" in dict(rejected)["1:7 +shared"]
    assert [c.shared_rollout for c in candidates if c.placement == "1:7"] == [False]
    assert any(c.placement == "6:2" and c.shared_rollout for c in candidates)


# --------------------------------------------------------------------------- the advice


def test_a_generation_dominated_job_picks_shared_rollout(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", GEN_DOMINATED, n=8)
    split = run_file(tmp_path / "split.jsonl", GEN_DOMINATED, actor_n=4, critic_n=4)
    advice = advise([stock, split], CLUSTER, push_s=1.5)
    # Actor and critic even: on halves nothing runs on at the weight sync, so the deferral adds nothing there;
    # the uneven splits with both on (test_advise_late_join.py) may still edge ahead.
    best = next(c for c in advice.candidates if not c.deferred)
    assert best.shared_rollout and best.placement == "halves"
    assert best.prediction.step_s == pytest.approx(lane(GEN_DOMINATED, "gen", 8) + 5 + 9 + 1 + 1.5)
    assert advice.recommended.shared_rollout
    assert "weight push of 1.50 s" in _shared_reason(best, list(advice.candidates), advice.model)
    assert "has not been measured on GPUs by us" in _shared_reason(best, list(advice.candidates), advice.model)

    code, out, _ = cli(capsys, str(stock), str(split), *CLUSTER_ARGS, "--push-s", "1.5")
    assert code == 0
    assert "recommended: split_placement.placement=" in out and "with split_placement.shared_rollout=true" in out
    assert "VERL_SPLIT_SHARED_ROLLOUT=1" in out
    words = " ".join(out.split())  # the report wraps its sentences
    assert "halves +shared " in out and "the model's prediction only" in words and "check it with a run" in words


def test_a_tiny_generation_does_not_pay_for_the_push(tmp_path):
    stock = run_file(tmp_path / "stock.jsonl", TINY_GEN, n=8)
    split = run_file(tmp_path / "split.jsonl", TINY_GEN, actor_n=4, critic_n=4)
    advice = advise([stock, split], CLUSTER, push_s=0.5)
    assert not advice.recommended.shared_rollout
    plain = next(c for c in advice.candidates if c.placement == "halves" and not c.shared_rollout)
    shared = next(c for c in advice.candidates if c.placement == "halves" and c.shared_rollout)
    gen_saved = lane(TINY_GEN, "gen", 4) - lane(TINY_GEN, "gen", 8)
    assert shared.prediction.step_s - plain.prediction.step_s == pytest.approx(0.5 - gen_saved)


def test_without_a_push_cost_the_variants_are_listed_not_recommended(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", GEN_DOMINATED, n=8)
    split = run_file(tmp_path / "split.jsonl", GEN_DOMINATED, actor_n=4, critic_n=4)
    advice = advise([stock, split], CLUSTER)
    assert not advice.recommended.shared_rollout and not any(c.shared_rollout for c in advice.candidates)
    halves = next(c for c in advice.unranked if c.placement == "halves")
    assert advice.break_even_push_s(halves) == pytest.approx(advice.recommended.prediction.step_s - (21 + 5 + 9 + 1))

    code, out, _ = cli(capsys, str(stock), str(split), *CLUSTER_ARGS, "--json")
    result = json.loads(out)
    assert code == 0 and result["shared_rollout"]["push_s"] is None
    assert "--push-s" in result["shared_rollout"]["push_source"]
    rows = {row["placement"]: row for row in result["shared_rollout"]["unranked"]}
    assert rows["halves"]["wins_if_push_under_s"] == pytest.approx(advice.break_even_push_s(halves))
    assert rows["halves"]["predicted_step_s_is"] == "a lower bound"
    assert all(not c["shared_rollout"] for c in result["candidates"])


def test_a_measured_push_is_used(tmp_path):
    stock = run_file(tmp_path / "stock.jsonl", GEN_DOMINATED, n=8)
    split = run_file(tmp_path / "split.jsonl", GEN_DOMINATED, actor_n=4, critic_n=4)
    shared = shared_run(tmp_path / "shared.jsonl", GEN_DOMINATED, 4, 4, push=2.0)
    run = read_run(shared, CLUSTER)
    assert run.shared_rollout and run.layout.endswith("shared rollout")
    assert run.gpus_of("gen") == 8 and run.gpus_of("actor_update") == 4
    assert run.fixed.mean == pytest.approx(1.0)  # the push is out of the fixed part
    assert run.push is not None and run.push.mean == pytest.approx(2.0)  # steps 2-5: 0.9, 1.1, 0.9, 1.1 x 2 s

    advice = advise([stock, split, shared], CLUSTER)
    assert advice.shared is not None and advice.shared.push_basis == MEASURED
    assert advice.shared.push_s == pytest.approx(2.0) and "shared.jsonl" in advice.shared.push_source
    assert advice.model.fixed_s == pytest.approx(1.0)
    assert advice.recommended.shared_rollout
    best = next(c for c in advice.candidates if not c.deferred)
    assert best.shared_rollout and best.prediction.step_s == pytest.approx(
        lane(GEN_DOMINATED, "gen", 8) + 5 + 9 + 1 + 2.0
    )
    # --push-s wins over the measurement, and says what was measured.
    given = advise([stock, split, shared], CLUSTER, push_s=30.0)
    assert (
        given.shared is not None and given.shared.push_basis == GIVEN and "measured 2.00 s" in given.shared.push_source
    )
    assert not given.recommended.shared_rollout


def test_a_push_estimated_from_the_model_size_is_labelled_assumed(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", GEN_DOMINATED, n=8)
    split = run_file(tmp_path / "split.jsonl", GEN_DOMINATED, actor_n=4, critic_n=4)
    args = [str(stock), str(split), *CLUSTER_ARGS, "--model-params", "7B", "--critic-offload-s", "0.25", "--json"]
    code, out, _ = cli(capsys, *args)
    shared = json.loads(out)["shared_rollout"]
    assert code == 0
    assert shared["push_s"] == pytest.approx(7e9 * 2 / 10e9) and shared["push_basis"] == ASSUMED
    assert "assumed" in shared["push_source"] and "GB/s" in shared["push_source"]
    assert shared["critic_offload_s"] == 0.25 and shared["critic_offload_basis"] == GIVEN
    assert shared["measured_on_gpus"] is False


def test_a_bad_parameter_count_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["advise", "run.jsonl", *CLUSTER_ARGS, "--model-params", "seven"])
    assert caught.value.code == 2 and "not a parameter count" in capsys.readouterr().err


def test_negative_seconds_exit_2(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", GEN_DOMINATED, n=8)
    code, out, err = cli(capsys, str(stock), *CLUSTER_ARGS, "--push-s", "-1")
    assert code == 2 and out == "" and "--push-s -1.0: give seconds" in err
