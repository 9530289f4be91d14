"""Plan split placement: turn a declarative placement and the cluster's shape into verl's pools.

Pure Python (no Ray, verl or torch import): the planner runs, and fails, before Ray starts.

A placement is one of:

* ``halves`` (the default): ``per-node`` on one node, ``per-group`` on several.
* ``per-node``: every node's GPUs split in two halves, the actor's side first.
* ``per-group``: the nodes split in two groups, the actor's group first.
* ``A:C``: on every node, the first ``A`` GPUs for the actor's side, the next ``C`` for the critic's.
* ``ROLES:GPUS;ROLES:GPUS``: explicit global GPU ids per role group, e.g.
  ``actor,rollout,ref:0-5;critic,reward:6-7``. ``GPUS`` is ``all`` or comma-separated indices and
  ``a-b`` ranges; node ``k`` holds GPUs ``k*G .. k*G+G-1``. Groups may span nodes.
* ``all``: every role on every GPU, one ``global_pool``: stock verl's layout.

Odd counts: the odd GPU (``per-node``) or the odd node (``per-group``) goes to the actor's side.
That side also runs rollout, the longest phase of a PPO step and the one that never overlaps
with the critic; the critic's side runs only the critic (and reward model) passes, which overlap
with the actor's. The seed recipe's ``nnodes // 2 == 0`` test left one node idle on odd
``nnodes >= 3`` and one GPU idle on an odd per-node count; here no GPU is left idle.

Roles are ``actor``, ``rollout``, ``ref``, ``critic`` and ``reward``. verl 0.9's hybrid engine runs
actor, rollout and ref in one worker (``verl/workers/engine_workers.py`` ``ActorRolloutRefWorker``),
so ``rollout`` and ``ref`` follow the actor's group and may be left out; placing them elsewhere is
an error. Roles sharing one group are collocated (one pool); a GPU in two groups is an error.

What verl can build: its ``resource_pool_spec`` is a GPU *count* per node
(``verl/single_controller/ray/base.py`` ``RayResourcePool``: one STRICT_PACK placement group per
entry). A pool's explicit GPU set becomes the count of its GPUs on each node it touches, in node
order, so uneven sets (``0-5,8-9`` -> ``[6, 2]``) are supported, and ``verl_split.pools`` pins each
count to its node. Which device ids inside a node a pool gets is Ray's choice: the ids within a
node are labels of the picture, not a pinning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_split.errors import PlacementError

ROLES: tuple[str, ...] = ("actor", "rollout", "ref", "critic", "reward")
#: Roles that live in the actor's worker in verl 0.9's hybrid engine.
ACTOR_SIDE: frozenset[str] = frozenset({"actor", "rollout", "ref"})

ACTOR_POOL = "actor_rollout_ref_pool"
CRITIC_POOL = "critic_pool"
GLOBAL_POOL = "global_pool"

SHORTHANDS: tuple[str, ...] = ("halves", "per-node", "per-group", "all")
DEFAULT_PLACEMENT = "halves"
#: Keys accepted in the ``split_placement`` config block.
CONFIG_KEYS: tuple[str, ...] = ("placement", "groups")

_RATIO = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
_INDEX = re.compile(r"^\d+$")
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_FORMS_HELP = (
    "Use halves, per-node, per-group, all, a ratio A:C such as 6:2, or role groups such as "
    "'actor,rollout,ref:0-5;critic,reward:6-7'."
)


# --------------------------------------------------------------------------- the cluster and the run


@dataclass(frozen=True)
class Cluster:
    """The shape verl is asked for: ``trainer.nnodes`` x ``trainer.n_gpus_per_node``."""

    nnodes: int
    n_gpus_per_node: int

    def __post_init__(self) -> None:
        for name in ("nnodes", "n_gpus_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlacementError(
                    f"{name} must be a whole number of at least 1, got {value!r}. "
                    f"Set trainer.{name} (or --{name.replace('_', '-')}) to the cluster's shape."
                )

    @property
    def n_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    def node_of(self, gpu: int) -> int:
        return gpu // self.n_gpus_per_node

    def describe(self) -> str:
        return (
            f"GPUs 0-{self.n_gpus - 1} on {self.nnodes} node{'s' if self.nnodes > 1 else ''} of {self.n_gpus_per_node}"
        )


@dataclass(frozen=True)
class ParallelSize:
    """A parallel size a role's pool must be a multiple of, and the config key it comes from."""

    role: str
    size: int
    key: str
    #: True when a group of ``size`` GPUs must sit on one node (a rollout replica).
    within_node: bool = False


@dataclass(frozen=True)
class Requirements:
    """What the run needs from a placement, read from verl's config."""

    critic: bool = True
    critic_reason: str = "algorithm.adv_estimator=gae"
    #: A reward model that runs on the trainer's GPUs (enabled, without its own reward_pool).
    reward: bool = False
    #: The reward model has its own ``reward_pool`` (``reward.reward_model.enable_resource_pool``).
    reward_own_pool: bool = False
    parallel: tuple[ParallelSize, ...] = ()

    def needed_roles(self) -> frozenset[str]:
        roles = set(ACTOR_SIDE)
        if self.critic:
            roles.add("critic")
        if self.reward:
            roles.add("reward")
        return frozenset(roles)


# --------------------------------------------------------------------------- parsed placements


@dataclass(frozen=True)
class GroupSpec:
    """One role group as written: roles and GPU ids (None means ``all``)."""

    roles: tuple[str, ...]
    gpus: tuple[tuple[int, int], ...] | None  # inclusive ranges, as written
    text: str


@dataclass(frozen=True)
class Placement:
    """A placement parsed but not yet laid onto a cluster."""

    kind: str  # halves, per-node, per-group, all, ratio, groups
    text: str
    ratio: tuple[int, int] | None = None
    groups: tuple[GroupSpec, ...] = ()
    source: str = "placement"


@dataclass(frozen=True)
class Pool:
    """One planned resource pool: its name, its roles and its global GPU ids."""

    name: str
    roles: tuple[str, ...]
    gpus: tuple[int, ...]
    n_gpus_per_node: int

    @property
    def per_node(self) -> dict[int, int]:
        """Node index -> GPUs of this pool on that node, in node order."""
        counts: dict[int, int] = {}
        for gpu in self.gpus:
            node = gpu // self.n_gpus_per_node
            counts[node] = counts.get(node, 0) + 1
        return counts

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(self.per_node)

    @property
    def process_on_nodes(self) -> list[int]:
        """verl's ``resource_pool_spec`` entry: GPUs per node, for the nodes the pool touches."""
        return list(self.per_node.values())

    @property
    def size(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class Plan:
    """A validated placement: pools with their GPUs, and the role -> pool mapping."""

    cluster: Cluster
    pools: tuple[Pool, ...]
    placement: str
    source: str = "placement"
    notes: tuple[str, ...] = field(default=())

    @property
    def resource_pool_spec(self) -> dict[str, list[int]]:
        return {pool.name: pool.process_on_nodes for pool in self.pools}

    @property
    def mapping(self) -> dict[str, str]:
        """Role name -> pool name, for every role this run uses (in role order)."""
        owner = {role: pool.name for pool in self.pools for role in pool.roles}
        return {role: owner[role] for role in ROLES if role in owner}

    def pool(self, name: str) -> Pool:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def pool_of(self, role: str) -> Pool | None:
        name = self.mapping.get(role)
        return None if name is None else self.pool(name)

    @property
    def gpu_owner(self) -> dict[int, Pool]:
        return {gpu: pool for pool in self.pools for gpu in pool.gpus}

    @property
    def idle_gpus(self) -> tuple[int, ...]:
        owner = self.gpu_owner
        return tuple(g for g in range(self.cluster.n_gpus) if g not in owner)

    def to_json(self) -> dict[str, Any]:
        return {"resource_pool_spec": self.resource_pool_spec, "mapping": self.mapping}


# --------------------------------------------------------------------------- parsing


def parse_placement(spec: Any, source: str = "placement") -> Placement:
    """Parse a shorthand string or a list of ``{roles, gpus}`` groups; raise PlacementError."""
    if isinstance(spec, str):
        return _parse_text(spec, source)
    if isinstance(spec, Sequence) and not isinstance(spec, (bytes, bytearray)):
        return _parse_structured(spec, source)
    raise PlacementError(
        f"{source} must be a string or a list of groups, got {type(spec).__name__} {spec!r}. {_FORMS_HELP}"
    )


def _parse_text(text: str, source: str) -> Placement:
    stripped = text.strip()
    if not stripped:
        raise PlacementError(f"{source} is empty. {_FORMS_HELP}")
    word = stripped.lower()
    if word in SHORTHANDS:
        return Placement(kind=word, text=word, source=source)
    ratio = _RATIO.match(stripped)
    if ratio:
        actor, critic = int(ratio.group(1)), int(ratio.group(2))
        return Placement(kind="ratio", text=f"{actor}:{critic}", ratio=(actor, critic), source=source)
    if ":" not in stripped:
        close = [s for s in SHORTHANDS if s[:3] == word[:3]]
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise PlacementError(f"{source}: unknown placement {stripped!r}.{hint} {_FORMS_HELP}")
    groups = []
    for number, chunk in enumerate(stripped.split(";"), start=1):
        if not chunk.strip():
            raise PlacementError(
                f"{source}: group {number} of {stripped!r} is empty (two ';' in a row, or a ';' at an end). "
                "Separate role groups with one ';', e.g. 'actor,rollout,ref:0-3;critic:4-7'."
            )
        if ":" not in chunk:
            raise PlacementError(
                f"{source}: group {chunk.strip()!r} has no ':' between its roles and its GPUs. "
                "Write ROLES:GPUS, e.g. 'critic,reward:4-7'."
            )
        roles_text, gpus_text = chunk.split(":", 1)
        roles = _parse_roles([r.strip() for r in roles_text.split(",")], chunk.strip(), source)
        gpus = _parse_gpus(gpus_text, chunk.strip(), source)
        groups.append(GroupSpec(roles=roles, gpus=gpus, text=chunk.strip()))
    return Placement(kind="groups", text=";".join(g.text for g in groups), groups=tuple(groups), source=source)


def _parse_structured(items: Sequence[Any], source: str) -> Placement:
    if not items:
        raise PlacementError(f"{source}: the list of groups is empty. Give at least the actor's group. {_FORMS_HELP}")
    groups = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, Mapping):
            raise PlacementError(
                f"{source}: group {number} is {type(item).__name__} {item!r}, not a mapping. "
                "Write each group as {roles: [actor, rollout, ref], gpus: '0-3'}."
            )
        extra = sorted(str(k) for k in item if k not in ("roles", "gpus"))
        if extra:
            raise PlacementError(
                f"{source}: group {number} has unknown key(s) {', '.join(extra)}; a group has only 'roles' and 'gpus'."
            )
        if "roles" not in item or "gpus" not in item:
            missing = "roles" if "roles" not in item else "gpus"
            raise PlacementError(
                f"{source}: group {number} has no {missing!r}. Write it as {{roles: [critic], gpus: '4-7'}}."
            )
        raw_roles = item["roles"]
        if isinstance(raw_roles, str):
            role_names = [r.strip() for r in raw_roles.split(",")]
        elif isinstance(raw_roles, Sequence) and all(isinstance(r, str) for r in raw_roles):
            role_names = [r.strip() for r in raw_roles]
        else:
            raise PlacementError(
                f"{source}: group {number} roles must be a list of role names or a comma-separated string, "
                f"got {raw_roles!r}."
            )
        raw_gpus = item["gpus"]
        if isinstance(raw_gpus, bool):
            raw_gpus = None
        if isinstance(raw_gpus, int):
            gpus_text = str(raw_gpus)
        elif isinstance(raw_gpus, str):
            gpus_text = raw_gpus
        elif (
            isinstance(raw_gpus, Sequence)
            and raw_gpus
            and all(isinstance(g, (int, str)) and not isinstance(g, bool) for g in raw_gpus)
        ):
            gpus_text = ",".join(str(g) for g in raw_gpus)
        else:
            raise PlacementError(
                f"{source}: group {number} gpus must be 'all', a string such as '0-3,8', an index or a list "
                f"of indices, got {raw_gpus!r}."
            )
        label = f"{','.join(role_names)}:{gpus_text}"
        roles = _parse_roles(role_names, label, source)
        gpus = _parse_gpus(gpus_text, label, source)
        groups.append(GroupSpec(roles=roles, gpus=gpus, text=label))
    return Placement(kind="groups", text=";".join(g.text for g in groups), groups=tuple(groups), source=source)


def _parse_roles(names: list[str], group: str, source: str) -> tuple[str, ...]:
    if not any(names):
        raise PlacementError(
            f"{source}: group {group!r} names no role. Put role names before the ':', e.g. 'critic,reward:4-7'."
        )
    seen: list[str] = []
    for name in names:
        role = name.lower()
        if not role:
            raise PlacementError(f"{source}: group {group!r} has an empty role name (a stray ','). Remove it.")
        if role not in ROLES:
            raise PlacementError(f"{source}: unknown role {name!r} in group {group!r}. Roles are {', '.join(ROLES)}.")
        if role in seen:
            raise PlacementError(f"{source}: role {role!r} is listed twice in group {group!r}. List it once.")
        seen.append(role)
    return tuple(seen)


def _parse_gpus(text: str, group: str, source: str) -> tuple[tuple[int, int], ...] | None:
    stripped = text.strip()
    if not stripped:
        raise PlacementError(
            f"{source}: group {group!r} names no GPU. Put GPU ids after the ':', e.g. '0-3' or '0,1,8-9' or 'all'."
        )
    if stripped.lower() == "all":
        return None
    ranges = []
    for token in (t.strip() for t in stripped.split(",")):
        if not token:
            raise PlacementError(f"{source}: group {group!r} has an empty GPU entry (a stray ','). Remove it.")
        if _INDEX.match(token):
            ranges.append((int(token), int(token)))
            continue
        match = _RANGE.match(token)
        if not match:
            raise PlacementError(
                f"{source}: {token!r} in group {group!r} is not a GPU index or range. "
                "Write indices and ranges such as '0-3,8' (global ids: node k holds k*G..k*G+G-1)."
            )
        low, high = int(match.group(1)), int(match.group(2))
        if low > high:
            raise PlacementError(f"{source}: GPU range {token!r} in group {group!r} is reversed. Write {high}-{low}.")
        ranges.append((low, high))
    return tuple(ranges)


# --------------------------------------------------------------------------- planning


def plan_placement(
    placement: Placement | str | Sequence[Any],
    cluster: Cluster,
    requirements: Requirements | None = None,
) -> Plan:
    """Lay a placement onto a cluster and validate it against the run's requirements."""
    if not isinstance(placement, Placement):
        placement = parse_placement(placement)
    req = requirements or Requirements()
    src = placement.source
    notes: list[str] = []
    split_roles = tuple(r for r in ("critic", "reward") if r in req.needed_roles())

    if placement.kind in ("halves", "per-node", "per-group", "ratio") and not split_roles:
        if placement.kind != "halves":
            raise PlacementError(
                f"{src}={placement.text!r} splits off a critic pool, but this run has no critic "
                f"({req.critic_reason}) and no reward model on the trainer's GPUs, so that pool would hold no "
                "role. Use placement 'all', or enable the critic (critic.enable=true)."
            )
        notes.append(
            f"no critic ({req.critic_reason}) and no reward model on the trainer's GPUs: nothing to split, "
            "so every GPU goes to one global_pool (stock layout)."
        )
        placement = Placement(kind="all", text="all", source=src)

    if placement.kind == "all":
        groups = [(tuple(r for r in ROLES if r in req.needed_roles()), tuple(range(cluster.n_gpus)), "all")]
    elif placement.kind == "groups":
        groups = _lay_groups(placement, cluster, req)
    else:
        actor_gpus, critic_gpus = _split_gpus(placement, cluster)
        groups = [(("actor", "rollout", "ref"), actor_gpus, "actor side"), (split_roles, critic_gpus, "critic side")]

    pools = _name_pools(groups, cluster)
    plan = Plan(cluster=cluster, pools=pools, placement=placement.text, source=src, notes=tuple(notes))
    _check_parallel_sizes(plan, req)
    return plan


def _split_gpus(placement: Placement, cluster: Cluster) -> tuple[tuple[int, ...], tuple[int, ...]]:
    nnodes, per_node = cluster.nnodes, cluster.n_gpus_per_node
    src = placement.source
    kind = placement.kind
    if kind == "halves":
        kind = "per-node" if nnodes == 1 else "per-group"
    if kind == "per-group":
        if nnodes < 2:
            raise PlacementError(
                f"{src}={placement.text!r} splits the nodes into two groups, but the cluster has 1 node. "
                "Use 'per-node' (or 'halves') to split the node's GPUs instead."
            )
        actor_nodes = (nnodes + 1) // 2  # the odd node goes to the actor's side (module docstring)
        boundary = actor_nodes * per_node
        return tuple(range(boundary)), tuple(range(boundary, cluster.n_gpus))
    if kind == "per-node":
        if per_node < 2:
            raise PlacementError(
                f"{src}={placement.text!r} splits each node's GPUs, but a node has only 1 GPU. "
                "Use 'per-group' with 2 or more nodes, or 'all'."
            )
        actor, critic = (per_node + 1) // 2, per_node // 2  # the odd GPU goes to the actor's side
    else:
        assert placement.ratio is not None
        actor, critic = placement.ratio
        if actor == 0:
            raise PlacementError(
                f"{src}={placement.text!r} gives the actor's pool 0 GPUs per node, an empty pool. "
                "Give each side at least 1 GPU, e.g. 6:2."
            )
        if critic == 0:
            raise PlacementError(
                f"{src}={placement.text!r} gives the critic's pool 0 GPUs per node, an empty pool. "
                "Give each side at least 1 GPU, e.g. 6:2, or use 'all' to collocate everything."
            )
        if actor + critic > per_node:
            raise PlacementError(
                f"{src}={placement.text!r} asks for {actor + critic} GPUs per node but a node has {per_node} "
                f"(trainer.n_gpus_per_node). Make A + C at most {per_node}, e.g. "
                f"{max(1, per_node - max(1, per_node // 4))}:{max(1, per_node // 4)}."
            )
    actor_gpus: list[int] = []
    critic_gpus: list[int] = []
    for node in range(nnodes):
        base = node * per_node
        actor_gpus.extend(range(base, base + actor))
        critic_gpus.extend(range(base + actor, base + actor + critic))
    return tuple(actor_gpus), tuple(critic_gpus)


def _lay_groups(
    placement: Placement, cluster: Cluster, req: Requirements
) -> list[tuple[tuple[str, ...], tuple[int, ...], str]]:
    src = placement.source
    needed = req.needed_roles()
    owner_of_gpu: dict[int, str] = {}
    group_of_role: dict[str, str] = {}
    laid = []
    for group in placement.groups:
        for role in group.roles:
            if role in group_of_role:
                raise PlacementError(
                    f"{src}: role {role!r} is in two groups, {group_of_role[role]!r} and {group.text!r}. "
                    "A role runs in one pool: keep it in one group (roles in one group are collocated)."
                )
            group_of_role[role] = group.text
        if group.gpus is None:
            gpus = tuple(range(cluster.n_gpus))
        else:
            gpu_list: list[int] = []
            for low, high in group.gpus:
                if high >= cluster.n_gpus:  # checked before expanding: '0-99999999999' must stay cheap
                    raise PlacementError(
                        f"{src}: GPU {high} in group {group.text!r} is outside the cluster ({cluster.describe()}). "
                        f"Use ids 0-{cluster.n_gpus - 1}, or raise trainer.nnodes / trainer.n_gpus_per_node."
                    )
                for gpu in range(low, high + 1):
                    if gpu in gpu_list:
                        raise PlacementError(
                            f"{src}: GPU {gpu} is listed twice in group {group.text!r}. List each GPU once."
                        )
                    gpu_list.append(gpu)
            gpus = tuple(sorted(gpu_list))
        for gpu in gpus:
            if gpu in owner_of_gpu:
                raise PlacementError(
                    f"{src}: GPU {gpu} is in two groups, {owner_of_gpu[gpu]!r} and {group.text!r}. "
                    "Give each GPU to one group; to collocate roles on the same GPUs, list them in one group "
                    "(e.g. 'actor,rollout,ref,critic:all')."
                )
            owner_of_gpu[gpu] = group.text
        laid.append((group, gpus))

    if "actor" not in group_of_role:
        raise PlacementError(f"{src}: no group holds the actor. Add it, e.g. 'actor,rollout,ref:0-3;critic:4-7'.")
    actor_group = group_of_role["actor"]
    for role, what in (
        ("rollout", "actor and rollout are one worker in verl's hybrid engine (ActorRolloutRefWorker)"),
        ("ref", "ref runs inside the actor's worker in verl 0.9 (Role.ActorRolloutRef)"),
    ):
        if role in group_of_role and group_of_role[role] != actor_group:
            raise PlacementError(
                f"{src}: {role!r} is in group {group_of_role[role]!r} but the actor is in {actor_group!r}; {what}, "
                f"so they cannot be placed apart. Move {role!r} into the actor's group, or leave it out "
                "(it follows the actor)."
            )
    if req.reward_own_pool and "reward" in group_of_role:
        raise PlacementError(
            f"{src}: the reward model has its own reward_pool (reward.reward_model.enable_resource_pool=true), "
            f"outside the trainer's GPUs, yet group {group_of_role['reward']!r} places it. Remove 'reward' from "
            "the placement, or set reward.reward_model.enable_resource_pool=false."
        )
    if req.critic and "critic" not in group_of_role:
        raise PlacementError(
            f"{src}: this run needs a critic ({req.critic_reason}) but no group holds it. Add a group such as "
            f"'critic:{cluster.n_gpus // 2}-{cluster.n_gpus - 1}', or disable the critic (critic.enable=false)."
        )
    if req.reward and "reward" not in group_of_role:
        raise PlacementError(
            f"{src}: the reward model is enabled (reward.reward_model.enable=true) but no group holds 'reward'. "
            "Add it to the critic's group (e.g. 'critic,reward:4-7') or the actor's."
        )

    result = []
    for group, gpus in laid:
        used = tuple(r for r in ROLES if r in group.roles and r in needed)
        if "actor" in group.roles:
            # rollout and ref follow the actor even when not written out.
            used = tuple(r for r in ROLES if r in needed and (r in group.roles or r in ACTOR_SIDE))
        if not used:
            unused = ", ".join(group.roles)
            raise PlacementError(
                f"{src}: group {group.text!r} holds only roles this run does not use ({unused}; critic: "
                f"{'on' if req.critic else 'off, ' + req.critic_reason}; reward model on the trainer's GPUs: "
                f"{'on' if req.reward else 'off'}). Drop the group, or use 'all'."
            )
        if "actor" not in group.roles and "critic" not in group.roles:
            raise PlacementError(
                f"{src}: group {group.text!r} holds the reward model alone. Put 'reward' in the critic's or the "
                "actor's group; verl 0.9 gives a reward model a pool of its own only through "
                "reward.reward_model.enable_resource_pool."
            )
        result.append((used, gpus, group.text))
    return result


def _name_pools(groups: list[tuple[tuple[str, ...], tuple[int, ...], str]], cluster: Cluster) -> tuple[Pool, ...]:
    pools = []
    for roles, gpus, label in groups:
        if not gpus:
            raise PlacementError(f"the pool for {label!r} ({', '.join(roles)}) has no GPU. Give it at least one.")
        if "actor" in roles:
            name = GLOBAL_POOL if "critic" in roles or len(groups) == 1 else ACTOR_POOL
        else:
            name = CRITIC_POOL
        pools.append(Pool(name=name, roles=roles, gpus=gpus, n_gpus_per_node=cluster.n_gpus_per_node))
    # The actor's pool first: verl creates pools in spec order, and the picture reads better.
    pools.sort(key=lambda p: 0 if "actor" in p.roles else 1)
    return tuple(pools)


def _check_parallel_sizes(plan: Plan, req: Requirements) -> None:
    for need in req.parallel:
        if need.size <= 1:
            continue
        pool = plan.pool_of(need.role)
        if pool is None:
            continue
        if pool.size % need.size:
            raise PlacementError(
                f"{plan.source}={plan.placement!r}: {pool.name} has {pool.size} GPUs, which is not divisible by "
                f"{need.key}={need.size} ({need.role}). Give the pool a multiple of {need.size} GPUs, or lower "
                f"{need.key.split(' ')[0]}."
            )
        if need.within_node and need.size <= max(pool.process_on_nodes):
            for node, count in pool.per_node.items():
                if count % need.size:
                    raise PlacementError(
                        f"{plan.source}={plan.placement!r}: {pool.name} has {count} GPUs on node {node}, so a "
                        f"{need.role} replica of {need.key}={need.size} GPUs would straddle nodes. Give the pool "
                        f"a multiple of {need.size} GPUs on every node it uses."
                    )


# --------------------------------------------------------------------------- from verl's config


def select_key(config: Any, dotted: str, default: Any = None) -> Any:
    """``config.a.b.c`` for an OmegaConf config or nested dicts; ``default`` when any part is missing."""
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        try:
            node = node[part] if isinstance(node, Mapping) else getattr(node, part)
        except (KeyError, AttributeError, TypeError):
            return default
        except Exception:  # OmegaConf: a missing key in a struct config, a ??? value, a bad interpolation
            return default
    return default if node is None else node


def _size(config: Any, key: str) -> int:
    value = select_key(config, key, 1)
    if isinstance(value, bool) or not isinstance(value, int):
        return 1
    return value


def requirements_from_config(config: Any) -> Requirements:
    """Read what a placement must satisfy from verl's (OmegaConf or dict) trainer config."""
    # The critic rule of verl/trainer/ppo/utils.py need_critic, restated so that this module
    # imports no verl: critic.enable decides when set, else the advantage estimator is GAE.
    enable = select_key(config, "critic.enable")
    estimator = str(select_key(config, "algorithm.adv_estimator", "gae"))
    if enable is not None:
        critic, reason = bool(enable), f"critic.enable={bool(enable)}"
    else:
        critic, reason = estimator.lower() == "gae", f"algorithm.adv_estimator={estimator}"
    reward_enabled = bool(select_key(config, "reward.reward_model.enable", False))
    own_pool = bool(select_key(config, "reward.reward_model.enable_resource_pool", False))

    parallel: list[ParallelSize] = []
    rollout = "actor_rollout_ref.rollout"
    replica = (
        _size(config, f"{rollout}.tensor_model_parallel_size")
        * _size(config, f"{rollout}.data_parallel_size")
        * _size(config, f"{rollout}.pipeline_model_parallel_size")
    )
    # A rollout replica is tp * dp * pp GPUs (verl/workers/rollout/replica.py RolloutReplica.world_size).
    parallel.append(
        ParallelSize("rollout", replica, f"{rollout}.tensor_model_parallel_size x data x pipeline", within_node=True)
    )
    for role, prefix in (
        ("actor", "actor_rollout_ref.actor"),
        ("ref", "actor_rollout_ref.ref"),
        ("critic", "critic"),
    ):
        if role == "critic" and not critic:
            continue
        fsdp = "fsdp" if role == "critic" else "fsdp_config"  # verl 0.9 names the critic's engine block 'fsdp'
        for key in (
            f"{prefix}.ulysses_sequence_parallel_size",
            f"{prefix}.{fsdp}.ulysses_sequence_parallel_size",
            f"{prefix}.{fsdp}.fsdp_size",
        ):
            parallel.append(ParallelSize(role, _size(config, key), key))
        if str(select_key(config, f"{prefix}.strategy", "")) == "megatron":
            mega = f"{prefix}.megatron"
            size = (
                _size(config, f"{mega}.tensor_model_parallel_size")
                * _size(config, f"{mega}.pipeline_model_parallel_size")
                * _size(config, f"{mega}.context_parallel_size")
            )
            parallel.append(ParallelSize(role, size, f"{mega}.tensor_model_parallel_size x pipeline x context"))
    if reward_enabled and not own_pool:
        rm = "reward.reward_model.rollout"
        size = (
            _size(config, f"{rm}.tensor_model_parallel_size")
            * _size(config, f"{rm}.data_parallel_size")
            * _size(config, f"{rm}.pipeline_model_parallel_size")
        )
        parallel.append(ParallelSize("reward", size, f"{rm}.tensor_model_parallel_size x data x pipeline", True))
    return Requirements(
        critic=critic,
        critic_reason=reason,
        reward=reward_enabled and not own_pool,
        reward_own_pool=reward_enabled and own_pool,
        parallel=tuple(p for p in parallel if p.size > 1),
    )


def placement_from_config(config: Any, env_value: str | None = None) -> Placement:
    """The run's placement: ``split_placement`` in the config wins over ``VERL_SPLIT_PLACEMENT``.

    The config is the run's own, recorded setting (hydra logs it with the run); the environment
    variable is a default for every run of a shell, so the more specific one wins.
    """
    block = select_key(config, "split_placement")
    if block is not None:
        if hasattr(block, "items") and not isinstance(block, Mapping):
            block = dict(block.items())
        if not isinstance(block, Mapping):
            raise PlacementError(
                f"split_placement must be a mapping such as {{placement: '6:2'}}, got {block!r}. "
                "Use +split_placement.placement=6:2 on the command line."
            )
        unknown = sorted(str(k) for k in block if k not in CONFIG_KEYS)
        if unknown:
            raise PlacementError(
                f"split_placement has unknown key(s) {', '.join(unknown)}; it accepts {', '.join(CONFIG_KEYS)}."
            )
        if "placement" in block and "groups" in block:
            raise PlacementError(
                "split_placement sets both 'placement' and 'groups'. Keep one: a shorthand in 'placement', "
                "or a list of {roles, gpus} in 'groups'."
            )
        if "groups" in block:
            groups = _plain(block["groups"])
            if not isinstance(groups, list):
                raise PlacementError(
                    f"split_placement.groups must be a list of {{roles, gpus}} mappings, got {groups!r}."
                )
            return parse_placement(groups, source="split_placement.groups")
        if "placement" in block:
            return parse_placement(_plain(block["placement"]), source="split_placement.placement")
    if env_value is not None and env_value.strip():
        return parse_placement(env_value, source="VERL_SPLIT_PLACEMENT")
    return parse_placement(DEFAULT_PLACEMENT, source="default placement")


def _plain(value: Any) -> Any:
    """OmegaConf containers to plain lists and dicts (duck-typed: no omegaconf import)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) or hasattr(value, "__iter__"):
        return [_plain(v) for v in value]
    return value


def cluster_from_config(config: Any) -> Cluster:
    nnodes = select_key(config, "trainer.nnodes")
    per_node = select_key(config, "trainer.n_gpus_per_node")
    return Cluster(nnodes=nnodes, n_gpus_per_node=per_node)


def plan_from_config(config: Any, env_value: str | None = None) -> Plan:
    """Plan the run of a verl config; ``env_value`` is VERL_SPLIT_PLACEMENT (read from settings if None)."""
    if env_value is None:
        from verl_split import settings

        env_value = settings.read().placement
    return plan_placement(
        placement_from_config(config, env_value), cluster_from_config(config), requirements_from_config(config)
    )


# --------------------------------------------------------------------------- the picture


_ROLE_TAGS = {"actor": "A", "rollout": "R", "ref": "F", "critic": "C", "reward": "M"}


def render_plan(plan: Plan) -> str:
    """A terminal picture: one row per node, one cell per GPU with its pool and roles; then spec and mapping."""
    cluster = plan.cluster
    owner = plan.gpu_owner
    letters = {pool.name: chr(ord("a") + i) for i, pool in enumerate(plan.pools)}
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
                cells.append(f"{gpu:>{width}} {label:<7}")
            head = f"node {node}" if start == 0 else ""
            lines.append(f"{head:<7}|" + "|".join(cells) + "|")
    lines.append("")
    lines.append("pools:")
    for pool in plan.pools:
        per_node = ", ".join(f"node {n}: {c}" for n, c in pool.per_node.items())
        roles = ", ".join(pool.roles)
        lines.append(f"  {letters[pool.name]} {pool.name:<24}{pool.size:>4} GPUs ({per_node})  roles: {roles}")
    if plan.idle_gpus:
        lines.append(f"  - idle                    {len(plan.idle_gpus):>3} GPUs: {_ranges(plan.idle_gpus)}")
    lines.append("roles: " + ", ".join(f"{tag}={role}" for role, tag in _ROLE_TAGS.items()))
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
