"""``VERL_SPLIT_LATE_JOIN=always``: the seam that forces the late join's decision (the end-to-end runs use it, so
that no test depends on when the rate model would decide; the rule itself: test_shared_rollout_late_join.py).

The managers, the balancer and the deferred critic update are test_shared_rollout_late_join.py's fakes. No Ray,
no verl trainer, no subprocess.
"""

from __future__ import annotations

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("shared rollout is built on verl 0.9's load balancer and managers", allow_module_level=True)

from test_shared_rollout_late_join import late, progress, wait_for  # noqa: E402, F401 (late: the fixture)

from verl_split.core import settings  # noqa: E402

pytestmark = pytest.mark.unit


def test_always_joins_where_the_rate_model_would_sit_out(late):  # noqa: F811 (the fixture, imported)
    # What test_the_critic_pool_sits_out_when_the_join_does_not_pay_and_the_caps_are_lifted gives the rate model:
    # 1 of 8 left, 2 requests a second, a 1 s push. With the rate model asked, the critic pool would sit out.
    settings.freeze(settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_LATE_JOIN": "always"}))
    late.balancer.so_far = progress(routed=7, released=6, since=3.0)
    late.manager._push_s = 1.0
    late.balancer.routed = {"h": 7, "c": 1}
    late.manager.update_weights(4)
    late.critic.set_result("critic done")
    wait_for(lambda: ("balancer", "open", ["c"]) in late.journal)
    late.manager.sleep_replicas()
    assert ("balancer", "lift_caps") not in late.journal
    assert ("shared", "wake_up_replicas") in late.journal and ("shared", "update_weights", 4) in late.journal
    pending = late.trainer._pending_sync_metrics
    assert pending["split/critic_pool_joined"] == 1.0
    assert "split/critic_pool_join_forecast_saved_s" not in pending  # no forecast was made
