"""nodes.check_fit and the placement-group wait, on plain data and fakes: no Ray cluster, no process."""

from __future__ import annotations

import pytest

from verl_split.core.errors import PlacementError
from verl_split.placement import Cluster, plan_placement

nodes = pytest.importorskip("verl_split.runtime.placement.nodes")

pytestmark = pytest.mark.unit


def node(name: str, total: float = 4, available: float | None = None, address: str = "10.0.0.1"):
    return nodes.NodeInfo(name * 8, address, total, total if available is None else available)


def test_fit_assigns_plan_nodes_in_order():
    plan = plan_placement("per-node", Cluster(2, 4))
    alive = [node("a"), node("b", address="10.0.0.2")]
    assigned = nodes.check_fit(plan, plan.resource_pool_spec, alive)
    assert {i: n.node_id for i, n in assigned.items()} == {0: "a" * 8, 1: "b" * 8}


def test_no_node_with_gpus():
    plan = plan_placement("per-node", Cluster(1, 4))
    with pytest.raises(PlacementError, match="no alive node with GPU resources.*ray start --num-gpus"):
        nodes.check_fit(plan, plan.resource_pool_spec, [])


def test_more_plan_nodes_than_ray_nodes():
    plan = plan_placement("per-group", Cluster(2, 4))
    with pytest.raises(PlacementError, match="needs 2 nodes .* has 1 .*Set trainer.nnodes=1"):
        nodes.check_fit(plan, plan.resource_pool_spec, [node("a")])


def test_a_busy_node_fails_with_what_is_free_and_what_the_plan_puts_there():
    plan = plan_placement("per-node", Cluster(1, 4))
    with pytest.raises(PlacementError) as exc:
        nodes.check_fit(plan, plan.resource_pool_spec, [node("a", total=4, available=3)])
    message = str(exc.value)
    assert "3 of 4 GPUs free" in message and "puts 4 there" in message
    assert "actor_rollout_ref_pool 2" in message and "critic_pool 2" in message
    assert "aaaaaaaa" in message and "1182" in message


def test_an_unplanned_pool_larger_than_any_node():
    plan = plan_placement("per-node", Cluster(1, 4))
    spec = {**plan.resource_pool_spec, "reward_pool": [6]}
    with pytest.raises(PlacementError, match="reward_pool asks for 6 GPUs .* more than 4 free"):
        nodes.check_fit(plan, spec, [node("a", total=4)])


def test_without_a_plan_only_the_largest_node_counts():
    assert nodes.check_fit(None, {"global_pool": [4]}, [node("a", 2), node("b", 4)]) == {}
    with pytest.raises(PlacementError, match="global_pool asks for 5"):
        nodes.check_fit(None, {"global_pool": [5]}, [node("a", 2), node("b", 4)])


def test_another_resource_name_is_named():
    with pytest.raises(PlacementError, match="no alive node with NPU resources"):
        nodes.check_fit(None, {"global_pool": [1]}, [], resource="NPU")


# --------------------------------------------------------------------------- the wait for placement groups


class FakeGroup:
    def __init__(self, index: int) -> None:
        self.ref = f"ready-{index}"

    def ready(self) -> str:
        return self.ref


def requests(*node_ids: str) -> list:
    return [nodes.GroupRequest(node_id=n, bundles=2, bundle={"CPU": 3, "GPU": 1}) for n in node_ids]


def test_ready_groups_are_kept():
    removed = []
    groups = [FakeGroup(0), FakeGroup(1)]

    def wait(refs, num_returns, timeout):
        assert num_returns == 2 and timeout == 5
        return list(refs), []

    nodes.await_placement_groups("critic_pool", groups, requests("n0", "n1"), 5, wait=wait, remove=removed.append)
    assert removed == []


def test_a_group_not_ready_in_time_names_pool_node_and_selector_and_removes_every_group():
    removed = []
    groups = [FakeGroup(0), FakeGroup(1)]

    def wait(refs, num_returns, timeout):
        return [refs[0]], [refs[1]]

    with pytest.raises(PlacementError) as exc:
        nodes.await_placement_groups(
            "critic_pool", groups, requests("node-zero", "node-one"), 2.5, wait=wait, remove=removed.append
        )
    message = str(exc.value)
    assert message.startswith("resource pool critic_pool: 1 of 2 placement group(s) not ready after 2.5s")
    assert "Ray node node-one" in message and "node-zero" not in message
    assert "{'ray.io/node-id': 'node-one'}" in message
    assert "Removed the 2 placement group(s)" in message and "ready_timeout_s" in message
    assert removed == groups


def test_a_failed_removal_does_not_hide_the_timeout():
    def remove(group):
        raise RuntimeError("gone")

    with pytest.raises(PlacementError, match="not ready after 1s"):
        nodes.await_placement_groups(
            "p", [FakeGroup(0)], requests("n0"), 1, wait=lambda refs, **_: ([], list(refs)), remove=remove
        )


def test_a_placement_group_off_its_planned_node_is_found():
    # Ray before PR 60170 ignored bundle label selectors for STRICT_PACK groups: read where they landed.
    from verl_split.runtime.placement.nodes import unpinned_groups

    tables = {"pg0": {"bundles_to_node_id": {0: "node-a", 1: "node-a"}}, "pg1": {"bundles_to_node_id": {0: "node-a"}}}
    assert unpinned_groups(["pg0", "pg1"], ["node-a", "node-b"], table=tables.__getitem__) == [
        (1, "node-b", {"node-a"})
    ]
    assert unpinned_groups(["pg0"], ["node-a"], table=tables.__getitem__) == []
    assert unpinned_groups(["pg2"], ["node-a"], table=lambda pg: {}) == []  # not placed yet: nothing to say
