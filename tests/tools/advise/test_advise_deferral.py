"""``verl-split advise`` and the deferred critic update (issue 22's ``defer_critic``): the ``+defer`` rows, the
choice between deferral and shared rollout, and runs that deferred. Synthetic profiles, not GPU measurements."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from support.advise_profiles import FIXED_S, SUBLINEAR, Profile, lane, run_file, split_step, stock_step, write_run
from test_advise_shared_rollout import costs, model_of

from verl_split.dryrun.report import phase_times
from verl_split.placement import Cluster
from verl_split.tools.advise import advise
from verl_split.tools.advise.model import predict
from verl_split.tools.advise.reasons import choose
from verl_split.tools.advise.runs import read_run
from verl_split.tools.advise.variants import DeferralCosts, defer
from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

CLUSTER = Cluster(1, 8)
#: The critic's update is twice the actor's: the update phase is the critic's, unless it is deferred.
BIG_CRITIC_UPDATE: Profile = {**SUBLINEAR, "critic_update": (10.0, 32.0)}
#: Generation is most of the step and scales well; the updates are even: only shared rollout has room to save.
GEN_HEAVY: Profile = {**SUBLINEAR, "gen": (1.0, 160.0), "critic_update": SUBLINEAR["actor_update"]}


# --------------------------------------------------------------------------- the model


def test_a_critic_update_no_longer_than_the_actors_gains_nothing():
    prep, updates, d = defer(5.0, 4.0, gen=10.0, sync=1.0, actor_prep=3.0, critic_prep=2.0, prep=True)
    assert (prep, updates, d.excess_s, d.hidden_s) == (3.0, 5.0, 0.0, 0.0)


def test_the_update_hides_behind_the_sync_and_the_next_generation():
    prep, updates, d = defer(5.0, 12.0, gen=10.0, sync=1.0, actor_prep=3.0, critic_prep=2.0, prep=True)
    assert (prep, updates, d.window_s, d.excess_s, d.hidden_s) == (3.0, 5.0, 16.0, 0.0, 7.0)


@pytest.mark.parametrize(("prep_overlap", "expected"), [(True, max(3.0, 4.0 + 2.0)), (False, max(3.0, 4.0) + 2.0)])
def test_what_does_not_hide_is_waited_for_before_values(prep_overlap, expected):
    prep, updates, d = defer(5.0, 20.0, gen=10.0, sync=1.0, actor_prep=3.0, critic_prep=2.0, prep=prep_overlap)
    assert (d.excess_s, updates, prep) == (4.0, 5.0, expected)


def test_deferral_never_slows_a_split_and_saves_at_most_the_critics_excess():
    sync = DeferralCosts(0.5, "test")
    for gen, (a, c) in itertools.product(
        [(0.0, 16.0), (8.0, 1.0), (1.0, 160.0)], itertools.product(range(1, 12), repeat=2)
    ):
        model = model_of(gen)
        plain = predict(model, a, c, colocated=False)
        deferred = predict(model, a, c, colocated=False, deferral=sync)
        longer = max(plain.lanes["critic_update"] - plain.lanes["actor_update"], 0.0)
        assert -1e-9 <= plain.step_s - deferred.step_s <= longer + 1e-9
        assert deferred.phases["updates"] == pytest.approx(plain.lanes["actor_update"])
        assert deferred.idle_share["critic"] <= plain.idle_share["critic"] + 1e-9


def test_both_on_with_a_critic_update_no_longer_than_the_actors_is_shared_rollout_alone():
    model = model_of((1.0, 160.0))
    both = predict(model, 4, 4, colocated=False, shared=costs(0.1), deferral=DeferralCosts(0.5, "test"))
    assert both.deferred is None and both.shared is not None
    assert both.step_s == predict(model, 4, 4, colocated=False, shared=costs(0.1)).step_s


# --------------------------------------------------------------------------- deferral or shared rollout


def _advise(tmp_path: Path, profile: Profile, **kwargs):
    stock = run_file(tmp_path / "stock.jsonl", profile, n=8)
    split = run_file(tmp_path / "split.jsonl", profile, actor_n=4, critic_n=4)
    return advise([stock, split], CLUSTER, **kwargs)


def test_a_long_critic_update_chooses_the_deferral(tmp_path):
    # A push too long for the critic pool to join generation in time: shared rollout adds nothing, with or
    # without the deferral (the +shared+defer rows: test_advise_late_join.py).
    advice = _advise(tmp_path, BIG_CRITIC_UPDATE, push_s=20.0)
    assert advice.recommended.deferred and advice.recommended.name.endswith(" +defer")
    assert advice.choice.use == "deferral" and advice.choice.defer_saves_s > advice.choice.shared_saves_s
    assert "the deferral (" in advice.choice.reason and "both together (" in advice.choice.reason


def test_a_long_generation_chooses_shared_rollout(tmp_path):
    advice = _advise(tmp_path, GEN_HEAVY, push_s=0.5)
    assert advice.recommended.shared_rollout
    assert advice.choice.use == "shared rollout" and advice.choice.shared_saves_s > advice.choice.defer_saves_s


def test_an_unknown_push_keeps_the_deferral_and_says_the_break_even(tmp_path):
    advice = _advise(tmp_path, GEN_HEAVY)
    assert advice.choice.use == "deferral" and advice.choice.defer_placement == "7:1"
    assert advice.choice.shared_saves_s is None and advice.choice.shared_placement == "halves"
    gap = next(c for c in advice.candidates if c.deferred).prediction.step_s - advice.unranked[0].prediction.step_s
    assert advice.choice.shared_break_even_push_s == pytest.approx(gap) and gap > 0
    assert "beats it only with a weight push under" in advice.choice.reason


def test_choose_without_a_split(tmp_path):
    assert choose([]) is None


# --------------------------------------------------------------------------- runs that deferred


def deferred_run(path: Path, profile: Profile, a: int, c: int, sync: float, prep_overlap: bool, steps: int = 5):
    """A split run with the critic's update deferred, as verl-split logs it (issue 22's metrics)."""
    records = []
    previous_wait = 0.0
    for _ in range(steps):
        data = split_step(profile, a, c)
        gen, a_prep, c_prep = data["timing_s/gen"], data["split/prep_actor_s"], data["split/prep_critic_s"]
        ua, uc = data["split/actor_update_s"], data["split/critic_update_s"]
        excess = max(0.0, uc - (ua + sync + gen))
        wait = excess if prep_overlap else max(0.0, excess - a_prep)
        data.update(
            {
                "split/critic_update_deferred": 1.0,
                "split/critic_update_hidden_s": min(uc - min(uc, ua), sync + gen),
                "split/critic_join_wait_s": wait,
                "split/update_wall_s": max(ua, uc),  # spans the critic's whole update, into the next step
                "timing_s/update_critic": 0.01,  # the dispatch
                "timing_s/update_actor": ua,
                "timing_s/update_weights": sync,
            }
        )
        if prep_overlap:
            prep = max(a_prep, previous_wait + c_prep)
            data["split/prep_wall_s"] = prep
        else:
            for key in ("split/prep_actor_s", "split/prep_critic_s", "split/prep_wall_s", "split/prep_overlapped"):
                data.pop(key)
            data["timing_s/values"] = previous_wait + c_prep  # the join is inside verl's values timer
            prep = a_prep + previous_wait + c_prep
        data["timing_s/step"] = gen + prep + 0.01 + ua + FIXED_S
        previous_wait = wait
        records.append(data)
    return write_run(path, records)


@pytest.mark.parametrize("prep_overlap", [True, False])
def test_a_deferred_run_gives_the_lanes_of_a_run_without(tmp_path, prep_overlap):
    path = deferred_run(tmp_path / "defer.jsonl", {**BIG_CRITIC_UPDATE, "gen": (0.5, 1.0)}, 4, 4, 0.3, prep_overlap)
    run = read_run(path, CLUSTER)
    assert run.deferred and "critic update deferred" in run.layout
    for name in ("critic_update", "critic_prep", "actor_update", "actor_prep"):
        assert run.lanes[name].mean == pytest.approx(lane(BIG_CRITIC_UPDATE, name, 4)), name
    assert run.join_wait.mean > 0 and run.hidden.mean > 0 and run.sync.mean == pytest.approx(0.3)
    assert run.fixed.mean == pytest.approx(FIXED_S)  # the dispatch counts in the update phase


def test_phase_times_of_a_deferred_step_count_what_the_step_waited_for():
    data = {"timing_s/gen": 5.0, "timing_s/update_critic": 0.01, "timing_s/update_actor": 3.0, "timing_s/step": 10.0}
    data.update({"split/critic_update_deferred": 1.0, "split/update_wall_s": 9.0})
    assert phase_times(data)["updates"] == pytest.approx(3.01)
    assert phase_times({**data, "split/critic_update_deferred": 0.0})["updates"] == 9.0


def test_the_report_and_json_show_the_deferral(tmp_path, capsys):
    stock = run_file(tmp_path / "stock.jsonl", BIG_CRITIC_UPDATE, n=8)
    split = deferred_run(tmp_path / "defer.jsonl", BIG_CRITIC_UPDATE, 4, 4, 0.3, True)
    args = [str(stock), str(split), "--nnodes", "1", "--n-gpus-per-node", "8", "--push-s", "20"]
    assert main(["advise", "--verbose", *args]) == 0
    out = capsys.readouterr().out
    assert "critic update hidden" in out and "wait at its join" in out
    assert " +defer " in out and "VERL_SPLIT_OVERLAP=updates,prep,defer_critic" in out
    flat = " ".join(out.split())
    assert "deferral, shared rollout or both: deferral, because the deferral (" in flat
    assert main(["advise", "--verbose", *args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["deferral"]["sync_s"] == pytest.approx(0.3) and result["deferral"]["choice"]["use"] == "deferral"
    assert result["recommended"]["deferred_critic"] is True
    assert any(c["deferred_critic"] and c["deferral"]["excess_s"] >= 0 for c in result["candidates"])
    assert result["runs"][1]["critic_update_deferred"] is True


def test_without_a_weight_sync_the_deferral_says_generation_covers_it(tmp_path):
    data = [stock_step(SUBLINEAR, 8)] * 3
    advice = advise([write_run(tmp_path / "stock.jsonl", data)], CLUSTER)
    assert advice.deferral.sync_s == 0.0 and "syncs the weights inside generation" in advice.deferral.sync_source
