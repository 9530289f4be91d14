"""The cluster as the pools see it: Ray's nodes, the per-node fit check, and placement groups awaited.

Plan node ``k`` is the ``k``-th alive node with GPUs, ordered by (IP address, node id): the order
verl itself sorts placement groups in (``sort_placement_group_by_node_ip``), so ranks stay stable
across restarts of the same cluster. A per-node request larger than a node's free GPUs is refused
before any placement group exists (verl's ``ResourcePoolManager._check_resource_available`` compares
only the cluster's total: verl issues 1182 and 2596); placement groups that never become ready are
removed after ``split_placement.ready_timeout_s`` and named.

Imports Ray, not verl.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import remove_placement_group

from verl_split.core.errors import PlacementError
from verl_split.placement import Plan

logger = logging.getLogger("verl_split")

#: Ray's built-in node label (``ray.util.placement_group.NODE_ID_LABEL_KEY`` in Ray 2.60).
NODE_ID_LABEL = "ray.io/node-id"


def announce(message: str) -> None:
    """Log at INFO on the ``verl_split`` logger when that reaches a handler, else print.

    Inside verl's TaskRunner actor logging is often left at WARNING; Ray forwards the actor's
    stdout to the driver's console, so a print is what shows up there. Exactly one of the two.
    """
    if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
        logger.info(message)
    else:
        print(f"[verl_split] {message}", flush=True)


def announce_plan(plan: Plan) -> None:
    """Say which placement the run uses and what it asks verl for."""
    announce(
        f"split placement {plan.placement!r} ({plan.source}): resource_pool_spec {plan.resource_pool_spec}, "
        f"mapping {plan.mapping}"
    )
    for note in plan.notes:
        announce(note)


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    total: float
    available: float


def device_resource() -> str:
    """The Ray resource verl asks for per worker (``GPU`` on CUDA), as ``RayResourcePool`` does."""
    try:
        from verl.plugin.platform import get_platform

        return get_platform().ray_resource_name()
    except Exception:  # an unknown platform: verl would fail on its own, with its own message
        return "GPU"


def cluster_nodes(resource: str | None = None) -> list[NodeInfo]:
    """Alive Ray nodes with the device resource, in plan order (IP, then node id)."""
    resource = resource or device_resource()
    # Private, as in verl's own ResourcePoolManager._check_resource_available: Ray 2.60 has no public
    # per-node *free* resources (ray.nodes() and ray.util.state.list_nodes give totals only).
    available = ray._private.state.available_resources_per_node()
    nodes = []
    for node in ray.nodes():
        total = float(node.get("Resources", {}).get(resource, 0))
        if not node.get("Alive") or total <= 0:
            continue
        free = float(available.get(node["NodeID"], {}).get(resource, 0))
        nodes.append(NodeInfo(node["NodeID"], node.get("NodeManagerAddress", ""), total, free))
    return sorted(nodes, key=lambda n: (n.address, n.node_id))


def check_fit(
    plan: Plan | None, spec: dict[str, list[int]], nodes: list[NodeInfo], resource: str = "GPU"
) -> dict[int, NodeInfo]:
    """Check every per-node request fits a real node; return plan node index -> Ray node."""
    if not nodes:
        raise PlacementError(
            f"the Ray cluster has no alive node with {resource} resources, so no pool can be placed. "
            f"Start Ray with {resource}s (ray start --num-gpus=N) or check `ray status`."
        )
    assigned: dict[int, NodeInfo] = {}
    planned: set[str] = set()
    if plan is not None:
        planned = {pool.name for pool in plan.pools}
        needed = plan.cluster.nnodes
        if len(nodes) < needed:
            raise PlacementError(
                f"the plan needs {needed} nodes with {resource}s but the Ray cluster has {len(nodes)} "
                f"({', '.join(f'{n.address} {n.node_id[:8]}: {n.total:g}' for n in nodes)}). "
                f"Set trainer.nnodes={len(nodes)}, or add nodes to the cluster."
            )
        for index in range(needed):
            node = nodes[index]
            parts = {p.name: p.per_node[index] for p in plan.pools if index in p.per_node}
            demand = sum(parts.values())
            if demand > node.available:
                detail = ", ".join(f"{name} {count}" for name, count in parts.items())
                raise PlacementError(
                    f"plan node {index} is Ray node {node.address} {node.node_id[:8]} with {node.available:g} of "
                    f"{node.total:g} {resource}s free, but the plan puts {demand} there ({detail}). verl would wait "
                    f"forever for that placement group (verl issues 1182, 2596). Set trainer.n_gpus_per_node="
                    f"{int(node.total)} or fewer, or free the node's {resource}s."
                )
            assigned[index] = node
    largest = max(n.available for n in nodes)
    for name, counts in spec.items():
        if name in planned:
            continue
        for count in counts:
            if count > largest:
                raise PlacementError(
                    f"resource pool {name} asks for {count} {resource}s on one node, but no Ray node has more "
                    f"than {largest:g} free. verl would wait forever for that placement group (verl issues 1182, "
                    f"2596). Lower that pool's n_gpus_per_node to at most {int(largest)}."
                )
    return assigned


@dataclass(frozen=True)
class GroupRequest:
    """What one placement group asked Ray for: for the error message when it never comes."""

    node_id: str
    bundles: int
    bundle: dict[str, float]

    @property
    def selector(self) -> dict[str, str]:
        return {NODE_ID_LABEL: self.node_id}


def await_placement_groups(
    pool: str,
    pgs: Sequence[Any],
    requests: Sequence[GroupRequest],
    timeout_s: float,
    *,
    wait: Callable[..., tuple[list[Any], list[Any]]] = ray.wait,
    remove: Callable[[Any], None] = remove_placement_group,
) -> None:
    """Wait until every placement group of ``pool`` is ready; after ``timeout_s``, remove them all and raise."""
    refs = [pg.ready() for pg in pgs]
    _, pending = wait(refs, num_returns=len(refs), timeout=timeout_s)
    if not pending:
        return
    waiting = set(pending)
    stuck = [index for index, ref in enumerate(refs) if ref in waiting]
    for pg in pgs:
        try:
            remove(pg)
        except Exception as exc:  # keep the timeout as the error; a failed removal is only logged
            logger.warning("could not remove a placement group of %s: %s", pool, exc)
    detail = "; ".join(
        f"group {i}: {requests[i].bundles} bundle(s) of {requests[i].bundle} on Ray node {requests[i].node_id}, "
        f"bundle_label_selector {requests[i].selector}"
        for i in stuck
    )
    raise PlacementError(
        f"resource pool {pool}: {len(stuck)} of {len(pgs)} placement group(s) not ready after {timeout_s:g}s "
        f"({detail}). Ray cannot place them: the node left the cluster, or other jobs hold its GPUs. Removed the "
        f"{len(pgs)} placement group(s) this pool created. Check `ray status` and free the GPUs; if the cluster is "
        "only slow to free them, raise +split_placement.ready_timeout_s."
    )


def unpinned_groups(
    pgs: Sequence[Any], node_ids: Sequence[str], table: Callable[[Any], dict[str, Any]] | None = None
) -> list[tuple[int, str, set[str]]]:
    """(index, planned node, nodes Ray used) of every placement group with a bundle off its planned node."""
    if table is None:
        from ray.util import placement_group_table as table
    off = []
    for index, (pg, node_id) in enumerate(zip(pgs, node_ids, strict=True)):
        used = {str(n) for n in (table(pg).get("bundles_to_node_id") or {}).values()}
        if used and used != {node_id}:
            off.append((index, node_id, used))
    return off
