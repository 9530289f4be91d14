"""The node choice and fit check, Ray's per-node load behind its fence, and the placement-group wait, on plain
data and fakes: no Ray cluster, no process."""

from __future__ import annotations

import pytest

from verl_split.core.errors import PlacementError
from verl_split.placement import Cluster, plan_placement

nodes = pytest.importorskip("verl_split.runtime.placement.nodes")

pytestmark = pytest.mark.unit


def node(name: str, total: float = 4, available: float | None = None, address: str = "10.0.0.1", draining=False):
    return nodes.NodeInfo(name * 8, address, total, total if available is None else available, draining)


def chosen(choice) -> dict[int, str]:
    return {index: n.node_id[0] for index, n in choice.assigned.items()}


def test_fit_assigns_plan_nodes_in_order():
    plan = plan_placement("per-node", Cluster(2, 4))
    alive = [node("a"), node("b", address="10.0.0.2")]
    choice = nodes.check_fit(plan, plan.resource_pool_spec, alive)
    assert chosen(choice) == {0: "a", 1: "b"} and choice.in_order and choice.skipped == ()
    assert choice.lines() == [
        "Plan nodes on Ray nodes: 0 -> 10.0.0.1 aaaaaaaa (4 of its 4 free GPUs), "
        "1 -> 10.0.0.2 bbbbbbbb (4 of its 4 free GPUs)"
    ]


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
    assert "plan node 0 puts 4 there (actor_rollout_ref_pool 2, critic_pool 2)" in message
    assert "10.0.0.1 aaaaaaaa: 3 of 4 GPUs free" in message and "1182" in message
    assert "set trainer.n_gpus_per_node=3 or fewer" in message


# --------------------------------------------------------------------------- a node that does not fit is skipped


def test_a_busy_node_is_skipped_for_the_spare_and_the_log_says_which_and_why():
    plan = plan_placement("per-node", Cluster(2, 4))
    alive = [node("a", available=1), node("b", address="10.0.0.2"), node("c", address="10.0.0.3")]
    choice = nodes.check_fit(plan, plan.resource_pool_spec, alive)
    assert chosen(choice) == {0: "b", 1: "c"} and choice.in_order
    lines = choice.lines()
    assert lines[0].startswith("Plan nodes on Ray nodes: 0 -> 10.0.0.2 bbbbbbbb (4 of its 4 free GPUs), 1 -> 10.0.0.3")
    assert lines[1] == "Skipped Ray nodes: 10.0.0.1 aaaaaaaa (too few free: 1 of 4 GPUs free)"


def test_a_draining_node_is_skipped_though_its_gpus_are_free():
    # Ray 2.60 shows a draining node alive with its GPUs free, but places no new placement group there.
    plan = plan_placement("per-node", Cluster(1, 4))
    alive = [node("a", draining=True), node("b", address="10.0.0.2"), node("c", address="10.0.0.3")]
    choice = nodes.check_fit(plan, plan.resource_pool_spec, alive)
    assert chosen(choice) == {0: "b"}
    assert choice.lines()[1] == (
        "Skipped Ray nodes: 10.0.0.1 aaaaaaaa (draining (4 of 4 GPUs free)), "
        "10.0.0.3 cccccccc (not needed: 4 of 4 GPUs free)"
    )


def test_the_choice_keeps_ray_s_order_where_it_can():
    # 16 plan nodes of 8 GPUs: node 3 is busy and node 9 is draining; 18 nodes, so both spares are used.
    plan = plan_placement("per-node", Cluster(16, 8))
    alive = [
        node(chr(ord("a") + i), total=8, available=2 if i == 3 else 8, address=f"10.0.1.{i:02d}", draining=i == 9)
        for i in range(18)
    ]
    choice = nodes.check_fit(plan, plan.resource_pool_spec, alive)
    order = [alive.index(choice.assigned[k]) for k in range(16)]
    assert order == [0, 1, 2, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17] and choice.in_order


def test_a_light_plan_node_takes_an_early_node_out_of_order_and_the_log_says_so():
    # Plan node 1 needs 4 GPUs; only node a, first in Ray's order, has just 4 free: no in-order choice fits.
    plan = plan_placement("actor,rollout,ref:0-7;critic:8-11", Cluster(2, 8))
    alive = [node("a", total=8, available=4), node("b", total=8, address="10.0.0.2")]
    choice = nodes.check_fit(plan, plan.resource_pool_spec, alive)
    assert chosen(choice) == {0: "b", 1: "a"} and not choice.in_order
    assert "not in the plan's node order" in choice.lines()[-1]


def test_no_choice_fits_names_the_demands_the_nodes_and_the_fixes():
    plan = plan_placement("per-node", Cluster(3, 8))
    alive = [
        node("a", total=8, available=6),
        node("b", total=8, address="10.0.0.2"),
        node("c", total=8, address="10.0.0.3", draining=True),
    ]
    with pytest.raises(PlacementError) as exc:
        nodes.check_fit(plan, plan.resource_pool_spec, alive)
    message = str(exc.value)
    assert "plan nodes 0-2 put 8 there (actor_rollout_ref_pool 4, critic_pool 4)" in message
    assert "1 of the 3 alive Ray nodes with GPUs have 8 or more free" in message
    assert "10.0.0.1 aaaaaaaa: 6 of 8 GPUs free, 10.0.0.3 cccccccc: draining (8 of 8 GPUs free)" in message
    assert "set trainer.nnodes=1 (the nodes with all 8 free)" in message
    assert "set trainer.n_gpus_per_node=8" not in message  # a node has all 8 free: not the fix


def test_a_plan_node_no_pool_uses_needs_no_ray_node():
    plan = plan_placement("actor,rollout,ref:0-3;critic:8-11", Cluster(3, 4))
    choice = nodes.check_fit(plan, plan.resource_pool_spec, [node("a"), node("b", address="10.0.0.2")])
    assert chosen(choice) == {0: "a", 2: "b"}


def test_an_unplanned_pool_larger_than_any_node():
    plan = plan_placement("per-node", Cluster(1, 4))
    spec = {**plan.resource_pool_spec, "reward_pool": [6]}
    with pytest.raises(PlacementError, match="reward_pool asks for 6 GPUs .* more than 4 free beside the plan"):
        nodes.check_fit(plan, spec, [node("a", total=4), node("b", total=4, address="10.0.0.2")])
    # The plan's own GPUs are not free for it: a 2-GPU reward pool fits only beside a half-used node.
    with pytest.raises(PlacementError, match="reward_pool asks for 2 GPUs .* more than 0 free"):
        nodes.check_fit(plan, {**plan.resource_pool_spec, "reward_pool": [2]}, [node("a", total=4)])


def test_without_a_plan_only_the_largest_node_counts():
    assert nodes.check_fit(None, {"global_pool": [4]}, [node("a", 2), node("b", 4)]).assigned == {}
    with pytest.raises(PlacementError, match="global_pool asks for 5"):
        nodes.check_fit(None, {"global_pool": [5]}, [node("a", 2), node("b", 4)])


def test_another_resource_name_is_named():
    with pytest.raises(PlacementError, match="no alive node with NPU resources"):
        nodes.check_fit(None, {"global_pool": [1]}, [], resource="NPU")


# --------------------------------------------------------------------------- Ray's private per-node load, fenced


class PrivateState:
    """A stand-in for ``ray._private.state`` as Ray 2.60 has it."""

    def available_resources_per_node(self):
        return {"a" * 8: {"GPU": 2.0, "CPU": 4.0}, "b" * 8: {"CPU": 1.0}}

    class state:  # noqa: N801 - the module-level GlobalState instance Ray names `state`
        @staticmethod
        def get_draining_nodes():
            return {"b" * 8: 0}


def test_node_load_reads_free_gpus_and_draining_nodes():
    load = nodes.node_load("GPU", PrivateState())
    assert load.free == {"a" * 8: 2.0, "b" * 8: 0.0} and load.draining == {"b" * 8: 0} and load.notes == ()


def test_a_ray_without_the_private_calls_still_runs_with_a_note():
    load = nodes.node_load("GPU", object())
    assert load.free is None and load.draining == {}
    assert len(load.notes) == 2
    assert "counts every alive node's GPUs as free" in load.notes[0] and "ready_timeout_s" in load.notes[0]
    assert "a draining node may be chosen" in load.notes[1]

    class Broken:
        def available_resources_per_node(self):
            raise RuntimeError("GCS gone")

    assert "RuntimeError: GCS gone" in nodes.node_load("GPU", Broken()).notes[0]


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


def test_a_large_cluster_s_spares_are_counted_and_every_unfit_node_named():
    plan = plan_placement("per-node", Cluster(2, 8))
    alive = [node(chr(ord("a") + i), total=8, address=f"10.0.2.{i:02d}") for i in range(14)]
    alive[12] = node("m", total=8, available=0, address="10.0.2.12")
    skipped = nodes.check_fit(plan, plan.resource_pool_spec, alive).lines()[1]
    assert skipped.count("(not needed: 8 of 8 GPUs free)") == 8  # choice.NAMED
    assert "and 3 more spare node(s)" in skipped and "10.0.2.12 mmmmmmmm (too few free: 0 of 8 GPUs free)" in skipped


def test_a_free_map_keyed_by_ids_no_alive_node_has_is_read_as_unknown_with_a_note(caplog):
    """Ray's private per-node state keyed otherwise than ``ray.nodes()`` (another id form): every node would read
    0 free and every run be refused; read as unknown instead, and said."""
    from verl_split.runtime.placement.nodes import NodeLoad, cluster_nodes

    alive = [
        {"NodeID": "aa01", "Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"GPU": 8.0}},
        {"NodeID": "aa02", "Alive": True, "NodeManagerAddress": "10.0.0.2", "Resources": {"GPU": 8.0}},
    ]
    other_ids = NodeLoad(free={"NodeID(aa01)": 8.0, "NodeID(aa02)": 0.0})
    infos = cluster_nodes("GPU", other_ids, alive)
    assert [n.available for n in infos] == [8.0, 8.0]  # as without the map: not 0 free everywhere
    assert "name none of the 2 alive node(s)" in caplog.text and "read as unknown" in caplog.text
    matched = cluster_nodes("GPU", NodeLoad(free={"aa01": 8.0, "aa02": 2.0}), alive)
    assert [n.available for n in matched] == [8.0, 2.0]


def test_node_ids_given_as_bytes_are_matched_as_hex():
    from verl_split.runtime.placement.nodes import node_load

    class State:
        def available_resources_per_node(self):
            return {bytes.fromhex("aa01"): {"GPU": 3.0}}

        state = type("S", (), {"get_draining_nodes": staticmethod(lambda: {bytes.fromhex("aa02"): 5})})()

    load = node_load("GPU", State())
    assert load.free == {"aa01": 3.0} and load.draining == {"aa02": 5}
