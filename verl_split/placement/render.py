"""Draw a plan for the terminal: one row per node, one cell per GPU."""

from __future__ import annotations

from collections.abc import Sequence

from verl_split.placement.model import Plan

_ROLE_TAGS = {"actor": "A", "rollout": "R", "ref": "F", "critic": "C", "reward": "M"}


def render_plan(plan: Plan) -> str:
    """A terminal picture: one row per node, one cell per GPU with its pool and roles; then spec and mapping."""
    cluster = plan.cluster
    owner = plan.gpu_owner
    letters = {pool.name: chr(ord("a") + i) for i, pool in enumerate(plan.pools)}
    # Shared rollout: the critic's pool generates too, though no role "rollout" is placed there.
    shared = {pool.name for pool in plan.rollout_pools[1:]}
    width = max(len(str(cluster.n_gpus - 1)), 1)
    lines = [
        f"placement {plan.placement!r} ({plan.source}) on {cluster.nnodes} node(s) x {cluster.n_gpus_per_node} GPUs",
        "",
    ]
    per_row = 8  # 8 cells of 10 characters: 2 nodes x 8 GPUs fit in 100 columns
    for node in range(cluster.nnodes):
        base = node * cluster.n_gpus_per_node
        gpus = list(range(base, base + cluster.n_gpus_per_node))
        for start in range(0, len(gpus), per_row):
            cells = []
            for gpu in gpus[start : start + per_row]:
                pool = owner.get(gpu)
                if pool is None:
                    label = "-:idle"
                else:
                    label = letters[pool.name] + ":" + "".join(_ROLE_TAGS[r] for r in pool.roles)
                    if pool.name in shared:
                        label += _ROLE_TAGS["rollout"]
                cells.append(f"{gpu:>{width}} {label:<7}")
            head = f"node {node}" if start == 0 else ""
            lines.append(f"{head:<7}|" + "|".join(cells) + "|")
    lines.append("")
    lines.append("pools:")
    for pool in plan.pools:
        per_node = ", ".join(f"node {n}: {c}" for n, c in pool.per_node.items())
        roles = ", ".join(pool.roles) + (", rollout (shared)" if pool.name in shared else "")
        lines.append(f"  {letters[pool.name]} {pool.name:<24}{pool.size:>4} GPUs ({per_node})  roles: {roles}")
    if plan.idle_gpus:
        lines.append(f"  - idle                    {len(plan.idle_gpus):>3} GPUs: {_ranges(plan.idle_gpus)}")
    lines.append("roles: " + ", ".join(f"{tag}={role}" for role, tag in _ROLE_TAGS.items()))
    if shared:
        actor, *others = plan.rollout_pools
        where = [f"GPUs {_ranges(actor.gpus)} (actor pool, hybrid)"]
        where += [f"{_ranges(pool.gpus)} (critic pool, shared rollout)" for pool in others]
        lines.append("rollout: " + " and ".join(where))
    if plan.meshes:
        lines.append("Megatron meshes:")
        lines.extend(f"  {line}" for line in plan.meshes)
    lines.append("")
    lines.append(f"resource_pool_spec: {plan.resource_pool_spec}")
    lines.append("mapping:")
    lines.extend(f"  {role:<8}-> {pool}" for role, pool in plan.mapping.items())
    for note in plan.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _ranges(gpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    spans: list[list[int]] = []
    for gpu in sorted(gpus):
        if spans and spans[-1][1] == gpu - 1:
            spans[-1][1] = gpu
        else:
            spans.append([gpu, gpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
