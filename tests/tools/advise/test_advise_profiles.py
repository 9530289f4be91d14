"""HybridFlow's regimes on synthetic profiles: ``verl-split advise`` ranks colocation first where scaling is near
linear and a split where it is strongly sublinear (the profiles: ``tests/support/advise_profiles.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.advise_profiles import FIXED_S, NEAR_LINEAR, SUBLINEAR, Profile, run_file

from verl_split.placement import Cluster
from verl_split.tools.advise import advise

pytestmark = pytest.mark.unit


# --------------------------------------------------------------------------- HybridFlow's regimes


def _advise(tmp_path: Path, profile: Profile, cluster: Cluster, actor_n: int, critic_n: int):
    stock = run_file(tmp_path / "stock.jsonl", profile, n=cluster.n_gpus)
    split = run_file(tmp_path / "split.jsonl", profile, actor_n=actor_n, critic_n=critic_n)
    return advise([stock, split], cluster)


def test_fit_recovers_the_profile(tmp_path):
    advice = _advise(tmp_path, SUBLINEAR, Cluster(1, 8), 4, 4)
    for name, (serial, parallel) in SUBLINEAR.items():
        model = advice.model.lanes[name]
        assert model.fit == "fitted"
        assert model.serial_s == pytest.approx(serial, rel=1e-6)
        assert model.parallel_s == pytest.approx(parallel, rel=1e-6)
    assert advice.model.fixed_s == pytest.approx(FIXED_S)
    assert advice.next_run is None


@pytest.mark.parametrize("cluster", [Cluster(1, 8), Cluster(2, 8), Cluster(8, 8)])
def test_near_linear_scaling_stock_colocated_wins(tmp_path, cluster):
    advice = _advise(tmp_path, NEAR_LINEAR, cluster, cluster.n_gpus // 2, cluster.n_gpus // 2)
    assert advice.recommended.placement == "all"
    assert all(c.speedup_vs_stock < 1.0 for c in advice.candidates[1:])
    assert "critic pool would idle" in advice.reason and "during generation" in advice.reason


@pytest.mark.parametrize("cluster", [Cluster(1, 8), Cluster(2, 8)])
def test_strongly_sublinear_scaling_a_split_wins(tmp_path, cluster):
    advice = _advise(tmp_path, SUBLINEAR, cluster, cluster.n_gpus // 2, cluster.n_gpus // 2)
    best = next(c for c in advice.candidates if not c.deferred)  # the updates and prep overlaps
    assert best.is_split and best.speedup_vs_stock > 1.15
    assert best.prediction.actor_gpus == best.prediction.critic_gpus  # equal actor and critic: even halves
    assert best.placement == "halves"
    assert "beside the actor" in advice.reason
    # The deferred critic update hides behind the next generation: the actor side may take more GPUs.
    assert advice.recommended.deferred and advice.recommended.prediction.step_s <= best.prediction.step_s


def test_a_larger_critic_gets_more_gpus(tmp_path):
    big_critic = {**SUBLINEAR, "critic_prep": (3.0, 32.0), "critic_update": (5.0, 64.0)}
    advice = _advise(tmp_path, big_critic, Cluster(1, 8), 4, 4)
    best_split = next(c for c in advice.candidates if c.is_split and not c.deferred)
    assert best_split.prediction.critic_gpus > best_split.prediction.actor_gpus
