"""Shared rollout's version-dependent parts (verl_split/runtime/shared_rollout/) on every 0.9 release and main.

verl 0.9.0 and main@1dda039 keep ``GlobalRequestLoadBalancer`` in ``llm_server.py`` and store
``load_balancer_cls or GlobalRequestLoadBalancer`` (never None); 0.9.1 moved the class to ``router.py`` and
keeps None unless a class is passed; 0.9.0's ``abort_replicas`` takes no ``reject_request``. Plain objects
stand in for verl's managers: these check our reading of them, the real runs are in
tests/e2e/test_shared_rollout_e2e.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("shared rollout is built on verl 0.8+", allow_module_level=True)

from verl_split.runtime.shared_rollout import both_pools, coordinator  # noqa: E402

pytestmark = pytest.mark.unit


def manager(load_balancer_cls, router_config_path=None):
    return SimpleNamespace(
        _load_balancer_cls=load_balancer_cls, rollout_config=SimpleNamespace(router_config_path=router_config_path)
    )


def test_verls_own_balancer_is_told_whether_stored_as_none_or_as_its_class():
    balancer = coordinator.GlobalRequestLoadBalancer
    assert coordinator.uses_verls_balancer(manager(None))  # 0.9.1
    assert coordinator.uses_verls_balancer(manager(balancer))  # 0.9.0, main@1dda039


def test_a_custom_balancer_or_router_config_keeps_its_own_routing():
    from verl_split.runtime.shared_rollout.balancer import VerlBalancer  # under 0.8's actor class

    class Custom(VerlBalancer):
        pass

    assert not coordinator.uses_verls_balancer(manager(Custom))
    assert not coordinator.uses_verls_balancer(manager(None, router_config_path="router.yaml"))


def test_the_balancer_comes_from_llm_server_which_every_0_9_release_has():
    from verl.workers.rollout import llm_server

    assert coordinator.GlobalRequestLoadBalancer is llm_server.GlobalRequestLoadBalancer


class Recording:
    def __init__(self):
        self.calls, self.replicas = [], []

    def abort_replicas(self, *args, **kwargs):
        self.calls.append((args, kwargs))


def test_abort_replicas_passes_on_what_the_trainer_gave():
    hybrid, shared = Recording(), Recording()
    both = both_pools.BothPoolsCheckpointManager(SimpleNamespace(), hybrid, shared, None)
    both.abort_replicas()  # 0.9.0's trainers: no reject_request
    both.abort_replicas(reject_request=True)  # 0.9.1's
    assert hybrid.calls == shared.calls == [((), {}), ((), {"reject_request": True})]
