"""Build verl's resource pools from a plan, pinned to the planned nodes, after a per-node fit check.

verl's ``resource_pool_spec`` is a GPU count per node and nothing more: ``RayResourcePool``
(``verl/single_controller/ray/base.py``) asks for one STRICT_PACK placement group per count and
lets Ray choose the node. So "4+4 per node" and "8 on node 0, 8 on node 1" can come out the same,
and a count larger than any node's GPUs leaves its placement group pending forever, because
``ResourcePoolManager._check_resource_available`` compares only the cluster's total (verl issues
1182 and 2596).

Here each planned pool gets a :class:`PinnedRayResourcePool` whose placement groups carry a bundle
label selector on ``ray.io/node-id`` (Ray >= 2.4x labels every node with its id; a hard constraint,
unlike ``_soft_target_node_id``), and :class:`SplitResourcePoolManager` first chooses a Ray node for
every plan node among the alive ones with its GPUs free (``choice.py``: busy, draining and undersized
nodes skipped, Ray's node order kept where it can be, so verl's ranks follow the plan), before any
placement group exists; the selectors name the chosen nodes, so the choice is what Ray places. The
check can still be beaten by a race (another job takes the GPUs, a node dies), so the placement groups
are awaited for at most ``split_placement.ready_timeout_s`` seconds; then they are removed and a
PlacementError names the pool, the nodes and the label selectors that could not be satisfied.

Ray floor: ``bundle_label_selector`` is the one Ray feature here newer than verl's own floor (2.41):
the argument came with Ray PR 52988 (May 2025) and Ray documents label scheduling from 2.49, so
``pyproject.toml`` asks for ``ray>=2.49``, not for the 2.60 the tests run (a higher floor would make
pip upgrade the Ray of an image whose running cluster is older: a version mismatch on join). Until
Ray PR 60170 (January 2026) STRICT_PACK placement groups ignored their bundle label selectors; so
after a pool's groups are ready, :func:`unpinned_groups` reads where Ray put them and a group off its
planned node is announced (the run goes on with Ray's layout; a newer Ray keeps the planned one).

The nodes and the waiting: ``nodes.py``; the choice of nodes and the fit check: ``choice.py``.

Imports Ray and verl: load it only inside a run (the seams do), never from ``placement``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group
from verl.single_controller.ray.base import RayResourcePool

try:
    from verl.single_controller.ray.base import ResourcePoolManager
except ImportError:  # verl 0.7.0 keeps it in verl/trainer/ppo/ray_trainer.py (0.7.1 moved it to base.py)
    from verl.trainer.ppo.ray_trainer import ResourcePoolManager

from verl_split.core import compat
from verl_split.placement import DEFAULT_READY_TIMEOUT_S, Plan, plan_from_config
from verl_split.placement.job_config import trainer_job
from verl_split.runtime.placement import nodes

logger = logging.getLogger("verl_split")


class PinnedRayResourcePool(RayResourcePool):
    """A ``RayResourcePool`` whose placement group ``i`` is pinned to ``node_ids[i]``."""

    def __init__(
        self, *args: Any, node_ids: list[str], ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if len(node_ids) != len(self._store):
            raise ValueError(f"{len(self._store)} per-node counts but {len(node_ids)} node ids")
        self.node_ids = list(node_ids)
        self.ready_timeout_s = ready_timeout_s

    def _bundle(self) -> dict[str, float]:
        # Same bundle shape as RayResourcePool.get_placement_groups (verl/single_controller/ray/base.py):
        # worker groups index into these bundles and colocated classes share them.
        bundle: dict[str, float] = {"CPU": self.max_colocate_count}
        if self.use_gpu:
            bundle[nodes.device_resource()] = 1
            if self.accelerator_type is not None:
                bundle[self.accelerator_type] = 1e-4
        return bundle

    def get_placement_groups(self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str = "cuda"):
        if self.pgs is None:
            prefix = name or f"{self.name_prefix}verl_split_{'_'.join(str(c) for c in self._store)}:"
            lifetime = "detached" if self.detached else None
            pgs: list[PlacementGroup] = []
            requests: list[nodes.GroupRequest] = []
            for index, (count, node_id) in enumerate(zip(self._store, self.node_ids, strict=True)):
                request = nodes.GroupRequest(node_id=node_id, bundles=count, bundle=self._bundle())
                requests.append(request)
                pgs.append(
                    placement_group(
                        bundles=[dict(request.bundle) for _ in range(count)],
                        strategy=strategy,
                        name=f"{prefix}{index}",
                        lifetime=lifetime,
                        bundle_label_selector=[request.selector] * count,
                    )
                )
            nodes.await_placement_groups(self.name_prefix, pgs, requests, self.ready_timeout_s)
            for index, planned, used in nodes.unpinned_groups(pgs, self.node_ids):
                nodes.announce(
                    f"WARNING: resource pool {self.name_prefix}: Ray put placement group {index} on node(s) "
                    f"{sorted(n[:8] for n in used)}, not on the planned node {planned[:8]}. Ray "
                    f"{ray.__version__} ignores bundle label selectors for STRICT_PACK placement groups (fixed by "
                    "Ray PR 60170); the run goes on with Ray's layout. Upgrade Ray for the planned one."
                )
            # Kept in plan (node) order: rank r of the worker group lands on the planned node.
            self.pgs = pgs
        return super().get_placement_groups(strategy=strategy, name=name, device_name=device_name)


@dataclass
class SplitResourcePoolManager(ResourcePoolManager):
    """verl's ``ResourcePoolManager`` with the plan's pools pinned and a per-node fit check."""

    plan: Plan | None = None

    def create_resource_pool(self) -> None:
        for name, counts in self.resource_pool_spec.items():
            nodes.announce(f"Creating resource pool: {name} with {list(counts)} GPUs")
        resource = nodes.device_resource()
        choice = nodes.check_fit(self.plan, self.resource_pool_spec, nodes.cluster_nodes(resource), resource)
        for line in choice.lines(resource):
            nodes.announce(line)
        super().create_resource_pool()
        if self.plan is None:
            return
        for pool in self.plan.pools:
            if pool.name not in self.resource_pool_dict:
                continue
            node_ids = [choice.assigned[index].node_id for index in pool.nodes]
            self.resource_pool_dict[pool.name] = PinnedRayResourcePool(
                process_on_nodes=pool.process_on_nodes,
                use_gpu=True,
                # verl 0.7's manager has no max_colocate_count field and hard-codes 3 (single_controller/ray/base.py).
                max_colocate_count=compat.colocate_count(self),
                name_prefix=pool.name,
                node_ids=node_ids,
                ready_timeout_s=self.plan.ready_timeout_s,
            )
            nodes.announce(
                f"Pinned resource pool {pool.name} to plan nodes {list(pool.nodes)} "
                f"(Ray nodes {[n[:8] for n in node_ids]})"
            )


#: verl ``Role`` member names (``verl/trainer/ppo/utils.py``) -> the planner's role names.
_ROLE_NAMES = {
    "Actor": "actor",
    "ActorRollout": "actor",
    "ActorRolloutRef": "actor",
    "Rollout": "rollout",
    "RefPolicy": "ref",
    "Critic": "critic",
    "RewardModel": "reward",
}
#: The pool stock verl 0.9 puts every trainer role on; verl's other pools (reward_pool,
#: teacher_pool) hold GPUs outside ``trainer.nnodes x trainer.n_gpus_per_node`` and stay as they are.
STOCK_POOL = "global_pool"


def split_pool_manager(plan: Plan, manager: ResourcePoolManager) -> SplitResourcePoolManager:
    """Re-point verl's roles from ``global_pool`` to the plan's pools; keep verl's other pools.

    ``manager.mapping`` is changed in place: the trainer (v1) and the TaskRunner (v0) hold the
    same dict as ``self.mapping``.
    """
    mapping = manager.mapping
    planned = plan.mapping
    actor_pool = planned["actor"]
    for role in list(mapping):
        if mapping[role] != STOCK_POOL:
            continue
        name = _ROLE_NAMES.get(getattr(role, "name", str(role)))
        target = planned.get(name) if name else None
        if target is None:
            # A role this run does not use (verl maps RewardModel even when it is off): park it
            # where the plan would put it, so nothing points at a pool that no longer exists.
            target = planned.get("critic", actor_pool) if name == "reward" else actor_pool
        mapping[role] = target
    spec = dict(plan.resource_pool_spec)
    for name, counts in manager.resource_pool_spec.items():
        if name != STOCK_POOL and name not in spec:
            spec[name] = list(counts)
    extra = {"max_colocate_count": manager.max_colocate_count} if hasattr(manager, "max_colocate_count") else {}
    return SplitResourcePoolManager(resource_pool_spec=spec, mapping=mapping, plan=plan, **extra)


def separate_reference(plan: Plan, role_worker_mapping: dict, mapping: dict) -> bool:
    """Give the reference a worker group of its own when the plan puts it on another pool than the actor's.

    verl's ``RayPPOTrainer`` (0.7 to 0.9) fuses the reference into the actor's worker when its role mapping has
    ``Role.ActorRolloutRef``, and builds a ``Role.RefPolicy`` worker group on that role's pool when the mapping has
    one (``init_workers`` in ``verl/trainer/ppo/ray_trainer.py``; ``ActorRolloutRefWorker`` takes ``role="ref"``).
    So the fused role becomes ``Role.ActorRollout`` plus ``Role.RefPolicy``, with the same worker class, and
    ``split_pool_manager`` then maps each to its planned pool. verl 0.7's legacy workers build ``Role.RefPolicy``
    already. Both dicts are changed in place: the TaskRunner and the trainer hold them. The planner refused the
    layouts verl cannot run this way (``placement.verl_config.reference_bound``). True when the reference moved.
    """
    from verl.trainer.ppo.utils import Role

    ref_pool, actor_pool = plan.mapping.get("ref"), plan.mapping["actor"]
    if ref_pool is None or ref_pool == actor_pool:
        return False
    if Role.ActorRolloutRef in role_worker_mapping:
        worker = role_worker_mapping.pop(Role.ActorRolloutRef)
        role_worker_mapping[Role.ActorRollout] = worker
        role_worker_mapping[Role.RefPolicy] = worker
        pool = mapping.pop(Role.ActorRolloutRef, STOCK_POOL)
        mapping[Role.ActorRollout] = pool
        mapping[Role.RefPolicy] = pool
    elif Role.RefPolicy not in role_worker_mapping:
        return False  # no reference runs (no KL term): nothing to place
    nodes.announce(
        f"The reference runs in a worker group of its own (Role.RefPolicy) on resource pool {ref_pool}, "
        f"the actor's worker group (Role.ActorRollout) on {actor_pool}"
    )
    return True


def install_plan_on_trainer(trainer: Any) -> None:
    """Plan a trainer's config and give the trainer the split, node-pinned pool manager.

    For trainers that build their ``resource_pool_manager`` themselves before creating any
    pool: verl 0.9's v1 ``PPOTrainer`` and the 0.7/0.8 ``RayPPOTrainer``.
    """
    plan = plan_from_config(trainer_job(trainer))  # the trainer's job, read once for every later reader here
    role_worker_mapping = getattr(trainer, "role_worker_mapping", None)
    if role_worker_mapping is not None:
        separate_reference(plan, role_worker_mapping, trainer.resource_pool_manager.mapping)
    trainer.resource_pool_manager = split_pool_manager(plan, trainer.resource_pool_manager)
    nodes.announce_plan(plan)
