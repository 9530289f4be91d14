"""The whole-step metrics (verl_split/runtime/metrics/whole_step.py), by hand."""

from __future__ import annotations

import pytest

from verl_split.runtime.metrics import whole_step

pytestmark = pytest.mark.unit


def test_whole_step_metrics_by_hand():
    data = {
        "timing_s/step": 10.0,
        "timing_s/gen": 4.0,
        "split/prep_actor_s": 1.0,
        "split/prep_critic_s": 1.5,
        "split/actor_update_s": 2.0,
        "split/critic_update_s": 2.5,
    }
    assert whole_step.whole_step_metrics(data) == {
        "split/step_s": 10.0,
        "split/actor_pool_busy_share": 0.7,  # (4 + 1 + 2) / 10
        "split/critic_pool_busy_share": 0.4,  # (1.5 + 2.5) / 10
    }
    assert whole_step.whole_step_metrics({"timing_s/step": 3.0}) == {}  # stock run: nothing
    # Shared rollout: the critic pool generated too, so generation counts on its side as well.
    shared = whole_step.whole_step_metrics({**data, "split/critic_pool_rollout_share": 0.5})
    assert shared["split/critic_pool_busy_share"] == pytest.approx(0.8)  # (4 + 1.5 + 2.5) / 10
    assert whole_step.whole_step_metrics({"split/critic_update_s": 1.0}) == {}  # no step timing
