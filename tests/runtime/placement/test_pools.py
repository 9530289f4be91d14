"""Pools pinned to planned nodes, on a real two-raylet Ray cluster with logical GPUs.

``ray.cluster_utils.Cluster`` starts two raylets on this machine, 4 logical GPUs each. verl worker
groups are built from plans with verl's own ``RayWorkerGroup`` and a tiny verl ``Worker``; each
worker reports its node id from inside itself.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(600)]

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    nodes = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 8, "num_gpus": 4, "include_dashboard": False},
    )
    nodes.add_node(num_cpus=8, num_gpus=4)
    nodes.wait_for_nodes()
    # An explicit address: other Ray instances on this machine must not be picked up.
    ray.init(address=nodes.address, runtime_env={"env_vars": {"PYTHONWARNINGS": "ignore"}})
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


def node_worker_class():
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class NodeWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def node_id(self):
            return ray.get_runtime_context().get_node_id()

    return NodeWorker


def build(plan, free_after: float = 8):
    from verl.single_controller.ray.base import RayClassWithInitArgs, RayWorkerGroup

    from verl_split.runtime.placement.nodes import cluster_nodes
    from verl_split.runtime.placement.pools import SplitResourcePoolManager

    manager = SplitResourcePoolManager(resource_pool_spec=plan.resource_pool_spec, mapping={}, plan=plan)
    manager.create_resource_pool()
    worker_cls = ray.remote(node_worker_class())
    placed = {}
    groups = []
    for pool in plan.pools:
        group = RayWorkerGroup(
            resource_pool=manager.resource_pool_dict[pool.name],
            ray_cls_with_init=RayClassWithInitArgs(cls=worker_cls),
            device_name="cuda",
        )
        groups.append(group)
        placed[pool.name] = group.node_id()
    from verl_split.runtime.placement.nodes import unpinned_groups

    for pool in plan.pools:  # Ray honoured every bundle label selector (Ray >= PR 60170)
        built = manager.resource_pool_dict[pool.name]
        assert unpinned_groups(built.pgs, built.node_ids) == [], pool.name
    order = [n.node_id for n in cluster_nodes("GPU")]
    expected = {
        pool.name: [order[node] for node, count in pool.per_node.items() for _ in range(count)] for pool in plan.pools
    }
    for group in groups:
        for worker in group.workers:
            ray.kill(worker)
    for pool in manager.resource_pool_dict.values():
        for pg in pool.pgs or ():
            ray.util.remove_placement_group(pg)
    wait_for_free_gpus(free_after)
    return placed, expected


def wait_for_free_gpus(total: float = 8, timeout: float = 60) -> None:
    """Removing placement groups frees their GPUs asynchronously; the next test needs them all."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        free = sum(r.get("GPU", 0) for r in ray._private.state.available_resources_per_node().values())
        if free >= total:
            return
        time.sleep(0.5)
    raise AssertionError(f"only {free} of {total} GPUs came back after the test")


def test_per_node_layout_lands_on_both_nodes(cluster):
    from verl_split.placement import Cluster, plan_placement

    plan = plan_placement("1:1", Cluster(2, 4))
    assert plan.resource_pool_spec == {"actor_rollout_ref_pool": [1, 1], "critic_pool": [1, 1]}
    placed, expected = build(plan)
    assert placed == expected
    assert len(set(placed["actor_rollout_ref_pool"])) == 2


def test_per_node_group_layout_keeps_pools_on_their_own_nodes(cluster):
    from verl_split.placement import Cluster, plan_placement

    # Both pools would fit on one node; unpinned, Ray may well pack them there.
    plan = plan_placement("actor,rollout,ref:0-1;critic:4-5", Cluster(2, 4))
    assert plan.resource_pool_spec == {"actor_rollout_ref_pool": [2], "critic_pool": [2]}
    placed, expected = build(plan)
    assert placed == expected
    assert set(placed["actor_rollout_ref_pool"]).isdisjoint(placed["critic_pool"])


def test_a_per_node_request_larger_than_a_node_fails_fast(cluster):
    from verl_split.core.errors import PlacementError
    from verl_split.placement import Cluster, plan_placement
    from verl_split.runtime.placement.pools import SplitResourcePoolManager

    plan = plan_placement("6:2", Cluster(1, 8))  # the nodes have 4 GPUs each
    manager = SplitResourcePoolManager(resource_pool_spec=plan.resource_pool_spec, mapping={}, plan=plan)
    with pytest.raises(PlacementError, match="plan node 0 puts 8 there .* set trainer.n_gpus_per_node=4 or fewer"):
        manager.create_resource_pool()


def test_an_unplanned_pool_larger_than_any_node_fails_fast(cluster):
    from verl_split.core.errors import PlacementError
    from verl_split.placement import Cluster, plan_placement
    from verl_split.runtime.placement.pools import SplitResourcePoolManager

    plan = plan_placement("1:1", Cluster(2, 4))
    spec = {**plan.resource_pool_spec, "reward_pool": [6]}
    manager = SplitResourcePoolManager(resource_pool_spec=spec, mapping={}, plan=plan)
    with pytest.raises(PlacementError, match="reward_pool asks for 6 GPUs on one node"):
        manager.create_resource_pool()


def test_more_nodes_planned_than_the_cluster_has(cluster):
    from verl_split.core.errors import PlacementError
    from verl_split.placement import Cluster, plan_placement
    from verl_split.runtime.placement.pools import SplitResourcePoolManager

    plan = plan_placement("halves", Cluster(3, 4))
    manager = SplitResourcePoolManager(resource_pool_spec=plan.resource_pool_spec, mapping={}, plan=plan)
    with pytest.raises(PlacementError, match="the plan needs 3 nodes with GPUs but the Ray cluster has 2"):
        manager.create_resource_pool()


def test_a_pool_ray_cannot_place_in_time_is_removed_with_a_clear_error(cluster):
    # The race check_fit cannot see: another job takes the node's GPUs between the check and the
    # pool's placement groups. Without a timeout verl would wait forever (verl issues 1182, 2596).
    from ray.util.placement_group import placement_group, placement_group_table

    from verl_split.core.errors import PlacementError
    from verl_split.runtime.placement.nodes import NODE_ID_LABEL, cluster_nodes
    from verl_split.runtime.placement.pools import PinnedRayResourcePool

    first = cluster_nodes("GPU")[0].node_id
    blocker = placement_group([{"GPU": 1, "CPU": 1}] * 2, bundle_label_selector=[{NODE_ID_LABEL: first}] * 2)
    ray.get(blocker.ready(), timeout=60)
    pool = PinnedRayResourcePool(
        process_on_nodes=[4], use_gpu=True, name_prefix="stuck_pool", node_ids=[first], ready_timeout_s=3
    )
    try:
        with pytest.raises(PlacementError) as exc:
            pool.get_placement_groups()
    finally:
        ray.util.remove_placement_group(blocker)
    message = str(exc.value)
    assert message.startswith("resource pool stuck_pool: 1 of 1 placement group(s) not ready after 3s"), message
    assert f"Ray node {first}" in message and f"{{'{NODE_ID_LABEL}': '{first}'}}" in message
    states = [pg["state"] for pg in placement_group_table().values() if pg["name"].startswith("stuck_pool")]
    assert states and set(states) == {"REMOVED"}, states
    wait_for_free_gpus()


# --------------------------------------------------------------------------- busy and draining nodes are skipped


def test_a_busy_node_is_skipped_and_the_pools_land_on_the_spare(cluster, capsys, caplog):
    """Three of one node's four GPUs held by another placement group: the plan's one node (1 + 1 GPUs) goes
    to the other node, and the log says which and why. Before, plan node 0 was always Ray's first node."""
    import dataclasses
    import logging
    import re

    from ray.util.placement_group import placement_group

    from verl_split.placement import Cluster, plan_placement
    from verl_split.runtime.placement.nodes import NODE_ID_LABEL, cluster_nodes

    caplog.set_level(logging.INFO, logger="verl_split")
    first, spare = (n.node_id for n in cluster_nodes("GPU"))
    blocker = placement_group([{"GPU": 1, "CPU": 1}] * 3, bundle_label_selector=[{NODE_ID_LABEL: first}] * 3)
    ray.get(blocker.ready(), timeout=60)
    plan = dataclasses.replace(plan_placement("1:1", Cluster(1, 2)), ready_timeout_s=60)
    try:
        placed, _ = build(plan, free_after=5)
    finally:
        ray.util.remove_placement_group(blocker)
    assert placed == {"actor_rollout_ref_pool": [spare], "critic_pool": [spare]}
    said = capsys.readouterr().out + caplog.text  # nodes.announce prints, or logs where a handler listens
    assert re.search(rf"Plan nodes on Ray nodes: 0 -> \S+ {spare[:8]} \(2 of its 4 free GPUs\)", said), said
    assert re.search(rf"Skipped Ray nodes: \S+ {first[:8]} \(too few free: 1 of 4 GPUs free\)", said), said
    wait_for_free_gpus()


def test_a_draining_node_is_never_chosen(cluster):
    """Ray 2.60 shows a draining node alive with its GPUs free, and never places a new group there: a plan
    node put there waited the whole ready timeout. Draining needs a node with work on it (an idle one is
    stopped at once), so a third node gets a CPU actor first; the node leaves once the actor is gone."""
    import time

    from ray.core.generated import autoscaler_pb2
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from verl_split.placement import Cluster, plan_placement
    from verl_split.runtime.placement.nodes import check_fit, cluster_nodes

    before = {n.node_id for n in cluster_nodes("GPU")}
    third = cluster.add_node(num_cpus=2, num_gpus=4)
    cluster.wait_for_nodes()

    @ray.remote(num_cpus=1)
    class Busy:
        def ping(self) -> int:
            return 1

    busy = Busy.options(scheduling_strategy=NodeAffinitySchedulingStrategy(third.node_id, soft=False)).remote()
    try:
        ray.get(busy.ping.remote(), timeout=60)
        gcs = ray._private.worker.global_worker.gcs_client
        reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
        accepted, _ = gcs.drain_node(third.node_id, reason, "test", int(time.time() * 1000) + 3_600_000)
        assert accepted
        alive = cluster_nodes("GPU")
        assert [n.draining for n in alive if n.node_id == third.node_id] == [True]
        plan = plan_placement("per-node", Cluster(2, 4))
        choice = check_fit(plan, plan.resource_pool_spec, alive)
        assert {n.node_id for n in choice.assigned.values()} == before
        assert f"{third.node_id[:8]} (draining (4 of 4 GPUs free))" in choice.lines()[1]
    finally:
        ray.kill(busy)
        cluster.remove_node(third, allow_graceful=False)
