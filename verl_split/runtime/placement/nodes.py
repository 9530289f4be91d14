"""The cluster as the pools see it: Ray's nodes and their load, and placement groups awaited.

Which Ray node holds which plan node, and the per-node fit check, are ``choice.py``'s: any alive node
with the plan node's GPUs free, skipping busy, draining and undersized ones. A per-node request larger
than a node's free GPUs is refused before any placement group exists (verl's
``ResourcePoolManager._check_resource_available`` compares only the cluster's total: verl issues 1182
and 2596); placement groups that never become ready are removed after ``split_placement.ready_timeout_s``
and named.

Ray's APIs (2.60): no public API gives free resources per node. ``ray.nodes()`` (what verl itself reads,
``sort_placement_group_by_node_ip``) gives alive nodes, addresses and totals; ``ray.util.state.list_nodes``
gives the same and needs the dashboard; ``ray.available_resources()`` is the cluster's sum. The free GPUs
per node and the draining nodes come from ``ray._private.state`` (``available_resources_per_node``, marked
DeveloperAPI, the call verl's own check makes; ``GlobalState.get_draining_nodes``), read in one place,
:func:`node_load`, which never raises: a Ray without them runs with every alive node's GPUs counted as
free and no node seen draining, and says so once.

Imports Ray, not verl.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import remove_placement_group

from verl_split.core import log
from verl_split.core.errors import PlacementError
from verl_split.placement import Plan
from verl_split.runtime.placement.choice import NodeChoice, NodeInfo, check_fit

__all__ = ["NodeChoice", "NodeInfo", "check_fit", "cluster_nodes", "node_load"]

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
    for mesh in plan.meshes:
        announce(f"Megatron mesh: {mesh}")
    for note in plan.notes:
        announce(note)


def device_resource() -> str:
    """The Ray resource verl asks for per worker (``GPU`` on CUDA), as ``RayResourcePool`` does."""
    try:
        from verl.plugin.platform import get_platform

        return get_platform().ray_resource_name()
    except Exception:  # an unknown platform: verl would fail on its own, with its own message
        return "GPU"


@dataclass(frozen=True)
class NodeLoad:
    """What Ray's private state says of its nodes' load (see the module's docstring)."""

    #: node id (hex) -> free units of the device resource; None when this Ray could not say.
    free: dict[str, float] | None
    #: node id (hex) of every node Ray is draining -> its deadline in ms (0: none).
    draining: dict[str, int] = field(default_factory=dict)
    #: Why a part is unknown, for the log.
    notes: tuple[str, ...] = ()


def node_load(resource: str, state: Any = None) -> NodeLoad:
    """Free ``resource`` per node and the draining nodes; never raises (``state``: a stand-in for tests)."""
    notes = []
    if state is None:
        try:
            state = importlib.import_module("ray._private.state")
        except Exception as exc:
            state = exc
    free = None
    try:
        per_node = state.available_resources_per_node()
        free = {_node_hex(node): float(res.get(resource, 0)) for node, res in per_node.items()}
    except Exception as exc:
        notes.append(
            f"Ray {ray.__version__} did not give the free {resource}s per node (ray._private.state."
            f"available_resources_per_node: {type(exc).__name__}: {exc}): the fit check counts every alive node's "
            f"{resource}s as free, so a node busy with other work is found only when its placement group is not "
            "ready after split_placement.ready_timeout_s."
        )
    draining: dict[str, int] = {}
    try:
        draining = {_node_hex(node): int(deadline) for node, deadline in state.state.get_draining_nodes().items()}
    except Exception as exc:
        notes.append(
            f"Ray {ray.__version__} did not say which nodes are draining (ray._private.state.state."
            f"get_draining_nodes: {type(exc).__name__}: {exc}): a draining node may be chosen, and is then found "
            "only when its placement group is not ready after split_placement.ready_timeout_s."
        )
    return NodeLoad(free, draining, tuple(notes))


def _node_hex(node: Any) -> str:
    """A node id as ``ray.nodes()`` spells it (hex), also where Ray's private state gives bytes or ``NodeID``s."""
    if isinstance(node, bytes):
        return node.hex()
    to_hex = getattr(node, "hex", None)
    return str(to_hex()) if callable(to_hex) and not isinstance(node, str) else str(node)


def cluster_nodes(
    resource: str | None = None, load: NodeLoad | None = None, nodes: list[dict[str, Any]] | None = None
) -> list[NodeInfo]:
    """Alive Ray nodes with the device resource, in Ray's node order (IP, then node id). ``nodes``: what
    ``ray.nodes()`` returns, given by tests and the control-plane benchmark."""
    resource = resource or device_resource()
    load = load if load is not None else node_load(resource)
    alive = [n for n in (ray.nodes() if nodes is None else nodes) if n.get("Alive")]
    alive = [n for n in alive if float(n.get("Resources", {}).get(resource, 0)) > 0]
    load = _matched(load, {n["NodeID"] for n in alive}, resource)
    for note in load.notes:
        log.once(logger, f"verl-split: {note}", logging.WARNING)
    infos = []
    for node in alive:
        node_id = node["NodeID"]
        total = float(node["Resources"][resource])
        free = total if load.free is None else load.free.get(node_id, 0.0)
        infos.append(NodeInfo(node_id, node.get("NodeManagerAddress", ""), total, free, node_id in load.draining))
    return sorted(infos, key=lambda n: (n.address, n.node_id))


def _matched(load: NodeLoad, alive: set[str], resource: str) -> NodeLoad:
    """Ray's private per-node map read as unknown when it names none of the alive nodes.

    Its keys are expected to be ``ray.nodes()``'s ``NodeID`` hex strings. A Ray that keyed it otherwise would
    make every node read as 0 free, and every run would be refused with a misleading message.
    """
    if load.free is None or not alive or alive & set(load.free):
        return load
    note = (
        f"Ray {ray.__version__}'s free {resource}s per node (ray._private.state.available_resources_per_node) name "
        f"none of the {len(alive)} alive node(s) of ray.nodes() ({len(load.free)} id(s), such as "
        f"{next(iter(load.free), '-')!r}): read as unknown, so the fit check counts every alive node's {resource}s "
        "as free, and a node busy with other work is found only when its placement group is not ready after "
        "split_placement.ready_timeout_s."
    )
    return NodeLoad(None, load.draining, (*load.notes, note))


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
