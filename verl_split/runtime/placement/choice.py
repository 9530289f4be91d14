"""Which Ray node holds each plan node: the fit check and the choice, on plain data (no Ray, no verl).

Plan node ``k`` is not "the ``k``-th node": it is a demand (GPUs of each pool there), and any alive node
with that many free GPUs can hold it. One busy, draining or undersized node must not stop a 16-node run
that has a spare, so the choice skips nodes that do not fit:

1. In Ray's node order, (IP address, node id), each plan node takes the first node after the previous
   choice that fits it. verl numbers a pool's workers by sorting its placement groups by node IP
   (``sort_placement_group_by_node_ip`` in ``verl/single_controller/ray/base.py``, a stable sort by
   IP string), so an in-order choice keeps every pool's ranks in plan order, and the same cluster in
   the same state gives the same choice.
2. When no in-order choice exists (a light plan node late in the plan, the only node with room for it
   early in Ray's order), a matching in any order (augmenting paths, deterministic): each pool then gets
   the planned nodes, and verl ranks its workers in the chosen nodes' IP order; the log says so.
3. Else a refusal naming every plan node's demand, the nodes that did not fit and why.

``nodes.py`` reads the cluster from Ray; ``pools.py`` pins each pool's placement groups to the chosen nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_split.core.errors import PlacementError
from verl_split.placement import Plan

#: At most this many nodes are named in a message; the rest are counted.
NAMED = 8


@dataclass(frozen=True)
class NodeInfo:
    """An alive Ray node with the device resource, as the fit check sees it."""

    node_id: str
    address: str
    total: float
    available: float
    #: Ray is draining it (preemption, autoscaler): it takes no new placement group.
    draining: bool = False

    @property
    def label(self) -> str:
        return f"{self.address} {self.node_id[:8]}"

    def fits(self, demand: int) -> bool:
        return not self.draining and self.available >= demand

    def state(self, resource: str) -> str:
        if self.draining:
            return f"draining ({self.available:g} of {self.total:g} {resource}s free)"
        return f"{self.available:g} of {self.total:g} {resource}s free"


@dataclass(frozen=True)
class NodeChoice:
    """Plan node index -> the Ray node chosen for it, and what was left out."""

    assigned: dict[int, NodeInfo]
    #: plan node index -> pool name -> GPUs of that pool there
    demands: dict[int, dict[str, int]]
    skipped: tuple[NodeInfo, ...] = ()
    #: True when the chosen nodes follow Ray's node order, so verl's ranks follow the plan's node order.
    in_order: bool = True

    def lines(self, resource: str = "GPU") -> list[str]:
        """What the log says: which Ray node holds which plan node, which were skipped and why."""
        if not self.assigned:
            return []
        chosen = ", ".join(
            f"{index} -> {node.label} ({sum(self.demands[index].values())} of its {node.available:g} free {resource}s)"
            for index, node in sorted(self.assigned.items())
        )
        lines = [f"Plan nodes on Ray nodes: {chosen}"]
        needs = {sum(d.values()) for d in self.demands.values()}
        # Every node skipped for a reason is named; spares that fit but were not needed, the first few.
        unfit = [n for n in self.skipped if not any(n.fits(need) for need in needs)]
        spare = [n for n in self.skipped if n not in unfit]
        named = [f"{n.label} ({_why_skipped(n, resource)})" for n in unfit]
        named += [f"{n.label} (not needed: {n.state(resource)})" for n in spare[:NAMED]]
        if len(spare) > NAMED:
            named.append(f"and {len(spare) - NAMED} more spare node(s)")
        if named:
            lines.append("Skipped Ray nodes: " + ", ".join(named))
        if not self.in_order:
            lines.append(
                "The chosen Ray nodes are not in the plan's node order (no in-order choice fits): verl numbers each "
                "pool's workers by node IP (sort_placement_group_by_node_ip), so a pool spanning several nodes has "
                "its ranks in the chosen nodes' IP order, not in plan node order; every pool still gets its planned "
                "GPUs per node."
            )
        return lines


def _why_skipped(node: NodeInfo, resource: str) -> str:
    return node.state(resource) if node.draining else f"too few free: {node.state(resource)}"


def plan_demands(plan: Plan) -> dict[int, dict[str, int]]:
    """Plan node index -> {pool: GPUs}, for every plan node some pool uses, in node order."""
    demands: dict[int, dict[str, int]] = {}
    for pool in plan.pools:
        for index, count in pool.per_node.items():
            demands.setdefault(index, {})[pool.name] = count
    return dict(sorted(demands.items()))


def _in_order(needs: list[int], nodes: list[NodeInfo]) -> list[int] | None:
    """Ray node index per need, increasing, each the first that fits after the previous; None when none.

    Taking the earliest fitting node at every step finds an increasing choice whenever one exists
    (a later node could only leave fewer candidates to the needs that follow).
    """
    chosen: list[int] = []
    start = 0
    for need in needs:
        found = next((i for i in range(start, len(nodes)) if nodes[i].fits(need)), None)
        if found is None:
            return None
        chosen.append(found)
        start = found + 1
    return chosen


def _any_order(needs: list[int], nodes: list[NodeInfo]) -> list[int] | None:
    """A Ray node index per need, all different, each fitting (bipartite matching); None when none exists."""
    owner: dict[int, int] = {}  # Ray node index -> need index

    def place(need: int, seen: set[int]) -> bool:
        for i, node in enumerate(nodes):
            if i in seen or not node.fits(needs[need]):
                continue
            seen.add(i)
            if i not in owner or place(owner[i], seen):
                owner[i] = need
                return True
        return False

    for need in range(len(needs)):
        if not place(need, set()):
            return None
    chosen = [0] * len(needs)
    for node, need in owner.items():
        chosen[need] = node
    return chosen


def check_fit(
    plan: Plan | None, spec: dict[str, list[int]], nodes: list[NodeInfo], resource: str = "GPU"
) -> NodeChoice:
    """Choose a Ray node for every plan node (``nodes`` in Ray's order) and check verl's other pools fit."""
    if not nodes:
        raise PlacementError(
            f"the Ray cluster has no alive node with {resource} resources, so no pool can be placed. "
            f"Start Ray with {resource}s (ray start --num-gpus=N) or check `ray status`."
        )
    choice = NodeChoice(assigned={}, demands={})
    if plan is not None:
        choice = _choose(plan, nodes, resource)
    used = {node.node_id: sum(choice.demands[i].values()) for i, node in choice.assigned.items()}
    left = [n.available - used.get(n.node_id, 0) for n in nodes if not n.draining]
    largest = max(left, default=0)
    planned = {pool.name for pool in plan.pools} if plan is not None else set()
    for name, counts in spec.items():
        if name in planned:
            continue
        for count in counts:
            if count > largest:
                raise PlacementError(
                    f"resource pool {name} asks for {count} {resource}s on one node, but no Ray node has more "
                    f"than {largest:g} free beside the plan's pools. verl would wait forever for that placement "
                    f"group (verl issues 1182, 2596). Lower that pool's n_gpus_per_node to at most {int(largest)}, "
                    "or free GPUs on the cluster."
                )
    return choice


def _choose(plan: Plan, nodes: list[NodeInfo], resource: str) -> NodeChoice:
    demands = plan_demands(plan)
    indexes = list(demands)
    needs = [sum(demands[i].values()) for i in indexes]
    if len(nodes) < len(needs):
        raise PlacementError(
            f"the plan needs {len(needs)} nodes with {resource}s but the Ray cluster has {len(nodes)} "
            f"({_named(nodes, resource)}). Set trainer.nnodes={len(nodes)}, or add nodes to the cluster."
        )
    in_order = True
    picked = _in_order(needs, nodes)
    if picked is None:
        in_order = False
        picked = _any_order(needs, nodes)
    if picked is None:
        raise PlacementError(_no_fit_message(plan, demands, nodes, resource))
    taken = set(picked)
    return NodeChoice(
        assigned={index: nodes[i] for index, i in zip(indexes, picked, strict=True)},
        demands=demands,
        skipped=tuple(n for i, n in enumerate(nodes) if i not in taken),
        in_order=in_order,
    )


def _no_fit_message(plan: Plan, demands: dict[int, dict[str, int]], nodes: list[NodeInfo], resource: str) -> str:
    by_demand: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for index, parts in demands.items():
        by_demand.setdefault(tuple(parts.items()), []).append(index)
    wanted = "; ".join(
        f"plan node{'s' if len(idx) > 1 else ''} {_spans(idx)} put{'' if len(idx) > 1 else 's'} "
        f"{sum(c for _, c in parts)} there ({', '.join(f'{name} {count}' for name, count in parts)})"
        for parts, idx in by_demand.items()
    )
    biggest = max(sum(d.values()) for d in demands.values())
    short = [n for n in nodes if not n.fits(biggest)]
    room = len(nodes) - len(short)
    fixes = ["free the busy nodes' GPUs (`ray status` shows what holds them)", "add nodes"]
    whole = sum(1 for n in nodes if n.fits(plan.cluster.n_gpus_per_node))
    if 0 < whole < plan.cluster.nnodes:
        fixes.append(f"set trainer.nnodes={whole} (the nodes with all {plan.cluster.n_gpus_per_node} free)")
    most = max((int(n.available) for n in nodes if not n.draining), default=0)
    if 0 < most < plan.cluster.n_gpus_per_node:
        fixes.append(f"set trainer.n_gpus_per_node={most} or fewer")
    return (
        f"the Ray cluster cannot hold the plan's {len(demands)} node(s): {wanted}; {room} of the {len(nodes)} alive "
        f"Ray nodes with {resource}s have {biggest} or more free, and the others do not fit "
        f"({_named(short, resource)}). verl would wait forever for those placement groups (verl issues 1182, 2596). "
        f"To fix: {', or '.join(fixes)}."
    )


def _named(nodes: list[NodeInfo], resource: str) -> str:
    named = ", ".join(f"{n.label}: {n.state(resource)}" for n in nodes[:NAMED])
    return named + (f", and {len(nodes) - NAMED} more" if len(nodes) > NAMED else "")


def _spans(indexes: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    spans: list[list[int]] = []
    for index in indexes:
        if spans and index == spans[-1][1] + 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
