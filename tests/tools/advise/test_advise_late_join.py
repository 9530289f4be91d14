"""``verl-split advise`` with shared rollout and the deferred critic update both on (issue 30): the
``+shared+defer`` rows, where the critic pool joins generation when the critic's update is done, and runs
that logged the late join read back. Synthetic profiles, not GPU measurements."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from support.advise_profiles import SUBLINEAR, Profile, lane, run_file, split_step, write_run
from test_advise_shared_rollout import costs, model_of

from verl_split.placement import Cluster
from verl_split.tools.advise import advise
from verl_split.tools.advise.candidates import rank
from verl_split.tools.advise.model import CostModel, LaneModel, build_model, predict
from verl_split.tools.advise.runs import AdviseError, read_run
from verl_split.tools.advise.variants import DeferralCosts, LateJoinStep, break_even_push
from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

CLUSTER = Cluster(1, 8)
CLUSTER_ARGS = ["--nnodes", "1", "--n-gpus-per-node", "8"]
SYNC = DeferralCosts(0.5, "test")
#: A critic-heavy job whose generation scales: the critic's update runs well past the actor's, and
#: generation is long enough for the critic pool to join it and take a share.
CRITIC_HEAVY: Profile = {**SUBLINEAR, "gen": (2.0, 96.0), "critic_update": (8.0, 40.0)}
#: A critic much lighter than the actor: its update is done before the actor's, nothing runs on at the sync.
LIGHT_CRITIC: Profile = {**SUBLINEAR, "critic_prep": (1.0, 2.0), "critic_update": (1.0, 4.0)}


def late(**kwargs: float) -> LateJoinStep:
    values = dict(actor_update_s=5.0, critic_update_s=12.0, gen_alone_s=10.0, gen_both_s=6.0, sync_s=1.0)
    values.update(push_s=0.5, offload_s=0.0, actor_prep_s=3.0, critic_prep_s=2.0, prep_overlap=True, fixed_s=1.0)
    return LateJoinStep(**{**values, **kwargs})


# --------------------------------------------------------------------------- the model


def test_the_critic_pool_joins_when_the_excess_and_the_push_are_done():
    step = late()
    # e = 12 - 5 = 7; the hybrid sync covers 1 s of it; j = 6 + 0.5 = 6.5 s into generation, before its end at 10.
    assert (step.excess_s, step.join_s, step.joined) == (7.0, 6.5, True)
    # by j the actor pool did 6.5/10 of the work; the rest at both pools' rate: 0.35 x 6
    assert step.gen_s == pytest.approx(6.5 + 0.35 * 6.0)
    assert step.wait_s == 0.0 and step.hidden_s == 7.0 and step.saved_s == pytest.approx(10.0 - 8.6)
    assert step.critic_pool_share == pytest.approx(1 - step.gen_s / 10.0)  # what the actor pool did not do
    assert step.step_s == pytest.approx(8.6 + 3.0 + 5.0 + 1.0)  # prep: max(3, 0 + 2); updates: the actor's


@pytest.mark.parametrize("prep_overlap", [True, False])
def test_a_critic_pool_too_late_never_joins_and_the_rest_is_waited_for_at_values(prep_overlap):
    step = late(critic_update_s=20.0, prep_overlap=prep_overlap)  # e = 15: j = 14.5 > gen 10
    assert not step.joined and step.gen_s == 10.0 and step.saved_s == 0.0 and step.critic_pool_share == 0.0
    assert step.wait_s == 4.0  # 15 - 1 (sync) - 10 (generation): the +defer row's excess
    assert step.prep_s == (max(3.0, 4.0 + 2.0) if prep_overlap else max(3.0, 4.0) + 2.0)


def test_the_offload_counts_only_when_the_critic_pool_joins():
    assert late(offload_s=0.7).step_s == pytest.approx(late().step_s + 0.7)
    assert late(critic_update_s=20.0, offload_s=0.7).step_s == late(critic_update_s=20.0).step_s


@pytest.mark.parametrize("gen", [(0.0, 16.0), (8.0, 16.0), (1.0, 160.0), (0.1, 1.0)])
def test_both_never_lose_to_one_switch_alone(gen):
    """Where the critic's update outlasts the actor's, both on is no slower than +shared or +defer (no offload);
    elsewhere there is no such row: both on behaves as +shared."""
    model = model_of(gen)
    model = CostModel({**model.lanes, "critic_update": LaneModel("critic_update", 5.0, 40.0, "fitted", ())}, 1.0)
    for a, c in itertools.product(range(1, 12), repeat=2):
        shared = predict(model, a, c, colocated=False, shared=costs(0.8))
        deferred = predict(model, a, c, colocated=False, deferral=SYNC)
        both = predict(model, a, c, colocated=False, shared=costs(0.8), deferral=SYNC)
        if both.late is None:
            assert model.lane_time("critic_update", c) <= model.lane_time("actor_update", a)
            assert both.step_s == shared.step_s
            continue
        assert both.step_s <= min(shared.step_s, deferred.step_s) + 1e-9
        assert both.phases["updates"] == pytest.approx(both.lanes["actor_update"])


def test_the_break_even_push_is_where_the_step_meets_the_target():
    step = late()
    target = step.step_s + 0.3
    push = break_even_push(step, target)
    assert push > step.push_s and step.with_push(push).step_s == pytest.approx(target, abs=1e-5)
    assert break_even_push(step, step.with_push(0.0).step_s - 1.0) == pytest.approx(-1.0)  # not even free


# --------------------------------------------------------------------------- the advice


def _advise(tmp_path: Path, profile: Profile, **kwargs):
    stock = run_file(tmp_path / "stock.jsonl", profile, n=8)
    split = run_file(tmp_path / "split.jsonl", profile, actor_n=4, critic_n=4)
    return advise([stock, split], CLUSTER, **kwargs)


def test_a_critic_heavy_job_recommends_both(tmp_path, capsys):
    advice = _advise(tmp_path, CRITIC_HEAVY, push_s=0.5)
    best = advice.recommended
    assert best.both and best.name.endswith(" +shared+defer") and best.shared_rollout and best.deferred
    one_switch = [c for c in advice.candidates if c.shared_rollout != c.deferred]
    assert best.prediction.step_s < min(c.prediction.step_s for c in one_switch) - 0.5
    assert best.prediction.late.joined and best.prediction.late.excess_s > 0
    assert "hides behind the weight sync and the actor pool's generation" in advice.reason
    assert "GPUs join" in advice.reason and "run on CPU only, never on GPUs" in advice.reason
    assert advice.choice.use == "both" and advice.choice.both_saves_s > advice.choice.defer_saves_s

    args = [str(tmp_path / "stock.jsonl"), str(tmp_path / "split.jsonl"), *CLUSTER_ARGS, "--push-s", "0.5"]
    assert main(["advise", "--verbose", *args]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert f"{best.name} " in out and "+shared+defer: both switches on" in flat
    assert "with split_placement.shared_rollout=true and defer_critic in VERL_SPLIT_OVERLAP" in flat
    switches = "VERL_SPLIT_OVERLAP=updates,prep,defer_critic VERL_SPLIT_SHARED_ROLLOUT=1 VERL_SPLIT_LATE_JOIN=on"
    assert f"{switches} python" in flat
    assert "VERL_SPLIT_LATE_JOIN=on: the critic pool joins generation when its update ends" in flat
    assert "deferral, shared rollout or both: both, because" in flat
    assert main(["advise", "--verbose", *args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["recommended"]["late_join"] is True and result["recommended"]["deferred_critic"] is True
    row = result["candidates"][0]
    assert row["late_join"]["critic_pool_joins"] and row["late_join"]["push_on_the_step_path"] is False
    assert result["deferral"]["choice"]["both_placement"] == best.placement


def test_a_light_critic_gets_no_combined_row(tmp_path):
    advice = _advise(tmp_path, LIGHT_CRITIC, push_s=0.5)
    assert not any(c.both for c in advice.candidates)  # nothing runs on at the sync: +shared is the same
    assert not advice.recommended.both and advice.choice.use != "both"
    assert "both together add nothing to shared rollout" in advice.choice.reason


def test_a_push_too_long_to_join_in_time_leaves_the_deferral(tmp_path):
    advice = _advise(tmp_path, CRITIC_HEAVY, push_s=60.0)
    assert advice.recommended.deferred and not advice.recommended.shared_rollout  # a tie goes to one switch
    assert advice.choice.use == "deferral"


def test_an_unknown_push_lists_both_with_its_break_even(tmp_path, capsys):
    advice = _advise(tmp_path, CRITIC_HEAVY)
    assert not any(c.shared_rollout for c in advice.candidates)
    both = next(c for c in advice.unranked if c.both and advice.break_even_push_s(c) > 0)
    push = advice.break_even_push_s(both)
    assert both.prediction.late.with_push(push).step_s == pytest.approx(advice.recommended.prediction.step_s, abs=1e-4)
    assert advice.choice.both_break_even_push_s and advice.choice.both_saves_s is None
    assert (
        main(["advise", "--verbose", str(tmp_path / "stock.jsonl"), str(tmp_path / "split.jsonl"), *CLUSTER_ARGS]) == 0
    )
    out = capsys.readouterr().out
    assert f"{both.name} " in out and f"with a free push: under {push:.2f} s" in out


# --------------------------------------------------------------------------- runs that joined late


def late_run(path: Path, profile: Profile, a: int, c: int, sync: float, push: float, steps: int = 5) -> Path:
    """A split run with both switches on, as verl-split logs it: generation shortened by the late join."""
    records = []
    for _ in range(steps):
        data = split_step(profile, a, c)
        ua, uc = data["split/actor_update_s"], data["split/critic_update_s"]
        model = late(
            actor_update_s=ua,
            critic_update_s=uc,
            gen_alone_s=lane(profile, "gen", a),
            gen_both_s=lane(profile, "gen", a + c),
            sync_s=sync,
            push_s=push,
        )
        data.update(
            {
                "timing_s/gen": model.gen_s,
                "timing_s/update_weights": sync,  # the hybrid sync only: the push ran beside generation
                "timing_s/update_critic": 0.01,
                "timing_s/update_actor": ua,
                "split/critic_update_deferred": 1.0,
                "split/critic_update_hidden_s": model.hidden_s,
                "split/critic_join_wait_s": model.wait_s,
                "split/critic_pool_joined": float(model.joined),
                "split/critic_pool_rollout_share": model.critic_pool_share,
            }
        )
        if model.joined:
            data["split/critic_pool_join_s"] = model.join_s
            data["split/shared_rollout_sync_s"] = push
            data["split/shared_rollout_saved_estimate_s"] = (
                model.gen_s * model.critic_pool_share / (1 - model.critic_pool_share)
            )
        data["timing_s/step"] = model.gen_s + data["split/prep_wall_s"] + 0.01 + ua + sync + 1.0
        records.append(data)
    return write_run(path, records)


def test_a_late_join_run_gives_the_push_but_not_its_mixed_generation(tmp_path, capsys):
    path = late_run(tmp_path / "both.jsonl", CRITIC_HEAVY, 4, 4, sync=0.5, push=0.8)
    run = read_run(path, CLUSTER)
    assert run.late_join and run.layout.endswith("shared rollout joined late, critic update deferred")
    # Every step joined part-way: its generation is neither pool size's, and the saving that would convert it
    # (split/shared_rollout_saved_estimate_s) is an estimate: issue 34, never a measurement in the fit.
    assert "gen" not in run.lanes and run.gen_both is None
    assert any(
        "0 on the actor pool's 4 GPUs, 0 on both pools' 8, 4 joined part-way and left out" in n for n in run.notes
    )
    assert run.push.mean == pytest.approx(0.8) and run.sync.mean == pytest.approx(0.5)  # not taken out of it
    assert run.fixed.mean == pytest.approx(1.0 + 0.5)  # the sync stays; no push in it
    assert run.joined.mean == 1.0 and run.join_at.mean > 0 and run.saved.mean > 0
    assert any("joined generation in 4 of 4 steps" in note for note in run.notes)
    flags = run.to_json()
    assert flags["late_join"] and flags["critic_pool_join_s"]["mean"] == pytest.approx(run.join_at.mean)

    stock = run_file(tmp_path / "stock.jsonl", CRITIC_HEAVY, n=8)
    assert main(["advise", "--verbose", str(stock), str(path), *CLUSTER_ARGS]) == 0
    out = capsys.readouterr().out
    assert "critic pool joined (0/1)" in out and "its join, s into gen" in out and "saved (estimate, unfitted)" in out
    advice = advise([stock, path], CLUSTER)
    assert advice.model.lanes["gen"].points == ((8, pytest.approx(lane(CRITIC_HEAVY, "gen", 8))),)  # stock only
    assert advice.shared.push_s == pytest.approx(0.8) and advice.deferral.sync_s == pytest.approx(0.5)
    assert advice.recommended.both  # the measured push prices the rows


def test_a_shared_run_whose_critic_pool_was_there_from_the_start_is_no_late_join(tmp_path):
    records = []
    for _ in range(4):
        data = split_step(CRITIC_HEAVY, 4, 4)
        data.update({"split/critic_pool_rollout_share": 0.5, "split/critic_pool_joined": 1.0})
        data.update({"split/critic_pool_join_s": 0.0, "split/shared_rollout_saved_estimate_s": 1.0})
        records.append(data)
    run = read_run(write_run(tmp_path / "shared.jsonl", records), CLUSTER)
    assert not run.late_join and run.shared_rollout and run.gpus_of("gen") == 8
    assert run.lanes["gen"].mean == pytest.approx(lane(CRITIC_HEAVY, "gen", 4))  # as measured, nothing added


def test_the_candidates_rank_both_only_beside_a_shared_row():
    model = model_of((2.0, 96.0))
    model = CostModel({**model.lanes, "critic_update": LaneModel("critic_update", 8.0, 40.0, "fitted", ())}, 1.0)
    candidates, _ = rank(model, Cluster(2, 8), rollout_tp=2, shared=costs(0.5), deferral=SYNC)
    both = {c.placement for c in candidates if c.both}
    shared = {c.placement for c in candidates if c.shared_rollout and not c.deferred}
    assert both and both <= shared and "1:7" not in both  # 1:7's critic pool holds no whole replicas of 2


def test_only_steps_on_one_pool_size_fit_generation_never_the_saved_estimate(tmp_path):
    """Issue 34: split/shared_rollout_saved_estimate_s is the runtime's linear-rate estimate. A step whose critic pool
    never joined measured the actor pool's generation, one whose pool was there from the start both pools'; only those
    enter the fit, and a bogus saving changes nothing."""
    records = []
    for i in range(6):
        data = split_step(CRITIC_HEAVY, 4, 4)
        kind = ("never", "start", "late")[i % 3]
        gen = {"never": lane(CRITIC_HEAVY, "gen", 4), "start": lane(CRITIC_HEAVY, "gen", 8), "late": 99.0}[kind]
        data.update({"timing_s/gen": gen, "split/critic_pool_rollout_share": 0.0 if kind == "never" else 0.4})
        data.update({"split/critic_pool_joined": 0.0 if kind == "never" else 1.0, "split/critic_update_deferred": 1.0})
        data.update({"split/critic_join_wait_s": 0.0, "split/shared_rollout_saved_estimate_s": 1000.0})
        data["split/critic_pool_join_s"] = {"never": 0.0, "start": 0.0, "late": 3.0}[kind]
        records.append(data)
    run = read_run(write_run(tmp_path / "mixed.jsonl", records), CLUSTER)
    assert run.late_join and run.steps == (2, 3, 4, 5, 6)
    assert run.lanes["gen"].mean == pytest.approx(lane(CRITIC_HEAVY, "gen", 4))  # steps 4: never joined
    assert run.gen_both.mean == pytest.approx(lane(CRITIC_HEAVY, "gen", 8))  # steps 2, 5: there from the start
    model = build_model([run])
    serial, parallel = CRITIC_HEAVY["gen"]
    assert (model.lanes["gen"].serial_s, model.lanes["gen"].parallel_s) == (
        pytest.approx(serial),
        pytest.approx(parallel),
    )


def test_no_step_on_one_pool_size_is_an_error(tmp_path):
    path = late_run(tmp_path / "both.jsonl", CRITIC_HEAVY, 4, 4, sync=0.5, push=0.8)
    with pytest.raises(AdviseError, match="no run measured generation on one pool size"):
        advise([path], CLUSTER)
