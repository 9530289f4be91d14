"""The planner's checks of a laid-out plan against what verl can build: parallel sizes, counts per node."""

from __future__ import annotations

from collections.abc import Callable

from verl_split.core.citations import cite
from verl_split.core.errors import PlacementError
from verl_split.placement.model import Plan, Requirements


def check_parallel_sizes(plan: Plan, req: Requirements) -> None:
    for need in req.parallel:
        if need.size <= 1:
            continue
        pool = plan.pool_of(need.role)
        if pool is None:
            continue
        if pool.size % need.size:
            raise PlacementError(
                f"{plan.source}={plan.placement!r}: {pool.name} has {pool.size} GPUs, which is not divisible by "
                f"{need.key}={need.size} ({need.role}"
                + (f"; {need.cite}" if need.cite else "")
                + f"). Give the pool a multiple of {need.size} GPUs, or lower {need.key.split(' ')[0]}."
            )
        if need.within_node and need.size <= max(pool.process_on_nodes):
            for node, count in pool.per_node.items():
                if count % need.size:
                    raise PlacementError(
                        f"{plan.source}={plan.placement!r}: {pool.name} has {count} GPUs on node {node}, so a "
                        f"{need.role} replica of {need.key}={need.size} GPUs would straddle nodes. Give the pool "
                        f"a multiple of {need.size} GPUs on every node it uses."
                    )


def check_same_count_per_node(plan: Plan, layouts: Callable[[], list[str]]) -> None:
    """A pool must have the same number of GPUs on every node it uses.

    verl builds a pool's workers node by node with the *first* node's count for every node
    (``RayWorkerGroup._init_with_resource_pool`` in ``verl/single_controller/ray/base.py``,
    ``local_world_size = resource_pool.store[0]`` in 0.7.1, 0.8.0 and 0.9.1; citations
    pool_first_node_count): ``[6, 2]`` fails its ``local_world_size <= pg.bundle_count`` assertion, ``[2, 6]`` starts
    4 of 8 workers with ``WORLD_SIZE=8``, which wait forever for the other four.
    """
    for pool in plan.pools:
        counts = pool.process_on_nodes
        if len(set(counts)) <= 1:
            continue
        parts = [f"{count} on node {node}" for node, count in pool.per_node.items()]
        per_node = parts[0].replace(" on", " GPUs on", 1) + "".join(f", {p}" for p in parts[1:-1]) + f" and {parts[-1]}"
        started = min(counts[0], min(counts)) * len(counts)
        fits = layouts()
        hint = f", e.g. {' or '.join(fits)}" if fits else ""
        raise PlacementError(
            f"{plan.source}={plan.placement!r}: {pool.name} would have {per_node}. verl starts a pool's "
            f"workers node by node with the first node's count for every node ({cite('pool_first_node_count')}): "
            f"with {counts} it "
            + (
                f"fails an assertion ({counts[0]} workers on a node with {min(counts)} GPUs)"
                if counts[0] > min(counts)
                else f"starts {started} of {pool.size} workers, which wait forever for the others"
            )
            + f". Give the pool the same number of GPUs on every node it uses{hint}."
        )
