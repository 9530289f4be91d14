"""The cost model of ``verl-split advise`` on hand-computed cases: fits, composition, idle shares, ranking."""

from __future__ import annotations

import pytest

from verl_split.placement import Cluster
from verl_split.tools.advise.candidates import placement_names, rank
from verl_split.tools.advise.model import FIT_AMDAHL, FIT_LINEAR, CostModel, LaneModel, fit_lane, predict
from verl_split.tools.advise.reasons import _trade, caveat, reason

pytestmark = pytest.mark.unit


def lane(name: str, serial: float, parallel: float) -> LaneModel:
    return LaneModel(name, serial, parallel, FIT_AMDAHL, ())


#: gen(8)=4 gen(4)=6; actor_prep 2|3; critic_prep 1|2; actor_update 3|5; critic_update 3|4; fixed 0.5.
HAND = CostModel(
    lanes={
        "gen": lane("gen", 2.0, 16.0),
        "actor_prep": lane("actor_prep", 1.0, 8.0),
        "critic_prep": lane("critic_prep", 0.0, 8.0),
        "actor_update": lane("actor_update", 1.0, 16.0),
        "critic_update": lane("critic_update", 2.0, 8.0),
    },
    fixed_s=0.5,
)


def test_amdahl_through_two_sizes():
    model = fit_lane("gen", [(1, 10.0), (2, 6.0)])
    assert model.fit == FIT_AMDAHL
    assert (model.serial_s, model.parallel_s) == pytest.approx((2.0, 8.0))
    assert model.time(4) == pytest.approx(4.0)


def test_least_squares_over_three_sizes():
    # t = 1 + 8/n exactly at 2, 4 and 8 GPUs, measured twice at 4.
    model = fit_lane("x", [(2, 5.0), (4, 3.0), (4, 3.0), (8, 2.0)])
    assert (model.serial_s, model.parallel_s) == pytest.approx((1.0, 8.0))


def test_one_size_assumes_linear_scaling():
    model = fit_lane("gen", [(8, 4.0), (8, 6.0)])
    assert model.fit == FIT_LINEAR
    assert (model.serial_s, model.parallel_s) == pytest.approx((0.0, 40.0))
    assert model.time(4) == pytest.approx(10.0)


def test_slower_with_more_gpus_is_all_serial():
    model = fit_lane("x", [(4, 2.0), (8, 3.0)])
    assert (model.serial_s, model.parallel_s) == pytest.approx((2.5, 0.0))


def test_superlinear_is_fitted_through_the_origin():
    model = fit_lane("x", [(4, 4.0), (8, 1.0)])  # the straight line would have a negative serial part
    assert model.serial_s == 0.0
    assert model.parallel_s == pytest.approx((4.0 / 4 + 1.0 / 8) / (1 / 16 + 1 / 64))


def test_colocated_adds_every_lane():
    p = predict(HAND, actor_gpus=8, critic_gpus=8, colocated=True)
    assert p.step_s == pytest.approx(4 + 2 + 1 + 3 + 3 + 0.5)
    assert p.phases["prep"] == pytest.approx(3.0) and p.phases["updates"] == pytest.approx(6.0)
    assert p.idle_share == {"global": pytest.approx(0.5 / 13.5)}


def test_split_takes_the_maximum_of_the_pools():
    p = predict(HAND, actor_gpus=4, critic_gpus=4, colocated=False)
    assert p.phases == {
        "gen": pytest.approx(6.0),
        "reward": 0.0,
        "prep": pytest.approx(3.0),
        "adv": 0.0,
        "updates": pytest.approx(5.0),
        "other": 0.5,
    }
    assert p.step_s == pytest.approx(14.5)
    assert p.idle_share["actor"] == pytest.approx(0.5 / 14.5)  # busy: gen 6 + prep 3 + update 5
    assert p.idle_share["critic"] == pytest.approx(1 - 6 / 14.5)  # busy: values 2 + update 4


def test_an_overlap_switched_off_adds_its_lanes():
    assert predict(HAND, 4, 4, False, overlaps=()).step_s == pytest.approx(6 + 5 + 9 + 0.5)
    assert predict(HAND, 4, 4, False, overlaps={"updates"}).step_s == pytest.approx(6 + 5 + 5 + 0.5)


def test_uneven_pools():
    p = predict(HAND, actor_gpus=6, critic_gpus=2, colocated=False)
    gen, ap, cp, au, cu = 2 + 16 / 6, 1 + 8 / 6, 8 / 2, 1 + 16 / 6, 2 + 8 / 2
    assert p.step_s == pytest.approx(gen + max(ap, cp) + max(au, cu) + 0.5)


def test_ranking_and_the_trade_add_up():
    candidates, rejected = rank(HAND, Cluster(1, 8))
    assert not rejected
    assert [c.prediction.step_s for c in candidates] == sorted(c.prediction.step_s for c in candidates)
    stock = next(c for c in candidates if c.placement == "all")
    assert stock.speedup_vs_stock == 1.0
    for cand in candidates:
        assert cand.speedup_vs_stock == pytest.approx(stock.prediction.step_s / cand.prediction.step_s)
        if cand.is_split:
            saved, lost = _trade(cand, stock, HAND)
            assert stock.prediction.step_s - cand.prediction.step_s == pytest.approx(saved - lost)
    halves = next(c for c in candidates if c.placement == "halves")
    assert halves.same_prediction_as == ("4:4",)
    # halves: saves the critic's 1 + 3 s, loses 14 - 9 s on the actor's side.
    assert _trade(halves, stock, HAND) == pytest.approx((4.0, 5.0))
    # 5:3: gen 2 + 16/5, max(1 + 8/5, 8/3), max(1 + 16/5, 2 + 8/3), fixed 0.5 = 13.03 s < stock's 13.5 s.
    assert candidates[0].placement == "5:3"
    assert candidates[0].prediction.step_s == pytest.approx(5.2 + 8 / 3 + 2 + 8 / 3 + 0.5)
    assert reason(candidates, HAND).startswith("the critic's values and update take 4.00 s of each stock step")
    stock_first = [stock, *(c for c in candidates if c is not stock)]
    assert reason(stock_first, HAND).startswith("under the best split, 5:3,")


def test_candidate_names_come_from_the_planner():
    assert placement_names(Cluster(1, 4), has_critic=True) == ["all", "halves", "3:1", "2:2", "1:3"]
    assert placement_names(Cluster(2, 2), has_critic=True) == [
        "all",
        "halves",
        "per-node",
        "1:1",
        "actor,rollout,ref:0-1;critic:2-3",
    ]
    assert placement_names(Cluster(4, 8), has_critic=False) == ["all"]


def test_same_gpu_counts_share_one_row():
    candidates, _ = rank(HAND, Cluster(2, 8))
    halves = next(c for c in candidates if c.placement == "halves")
    assert set(halves.same_prediction_as) == {"per-node", "4:4", "actor,rollout,ref:0-7;critic:8-15"}
    names = [c.placement for c in candidates]
    assert len(names) == len(set(names)) == 1 + 1 + 6  # all, halves (8+8), 7:1 .. 1:7 without 4:4


def test_the_planner_rejects_pools_that_cannot_hold_a_rollout_replica():
    candidates, rejected = rank(HAND, Cluster(1, 8), rollout_tp=4)
    assert {c.placement for c in candidates} == {"all", "halves"}
    assert "5:3" in dict(rejected) and "not divisible by --rollout-tp=4" in dict(rejected)["5:3"]


def test_a_runner_up_within_the_spread_is_said():
    candidates, _ = rank(HAND, Cluster(1, 8))
    gap = candidates[1].prediction.step_s / candidates[0].prediction.step_s - 1
    assert caveat(candidates, step_cv=gap / 2) is None
    text = caveat(candidates, step_cv=gap * 2)
    assert text is not None and candidates[1].placement in text and "measure both" in text


def test_the_trade_adds_up_with_the_overlaps_off():
    candidates, _ = rank(HAND, Cluster(1, 8), overlaps=frozenset())
    stock = next(c for c in candidates if c.placement == "all")
    assert candidates[0] is stock  # nothing side by side: a split only loses GPUs
    for cand in candidates[1:]:
        saved, lost = _trade(cand, stock, HAND)
        assert stock.prediction.step_s - cand.prediction.step_s == pytest.approx(saved - lost)
