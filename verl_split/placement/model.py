"""The placement's data: roles, pool names, the cluster, the run's requirements, parsed placements and plans."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement.mesh import Mesh

ROLES: tuple[str, ...] = ("actor", "rollout", "ref", "critic", "reward")
#: Roles that live in the actor's worker in verl 0.9's hybrid engine.
ACTOR_SIDE: frozenset[str] = frozenset({"actor", "rollout", "ref"})

ACTOR_POOL = "actor_rollout_ref_pool"
CRITIC_POOL = "critic_pool"
GLOBAL_POOL = "global_pool"
#: How long pool creation waits for Ray to place a pool's placement groups: generous, since a
#: cluster may need a while to free GPUs, but an end instead of verl's wait forever.
DEFAULT_READY_TIMEOUT_S = 600.0
#: Worker groups verl lets share one GPU: its ``ResourcePoolManager`` makes every pool with
#: ``max_colocate_count=3`` and each worker asks for ``1 / max_colocate_count`` of a GPU
#: (``verl/single_controller/ray/base.py``); a fourth worker group on a GPU would wait forever.
MAX_WORKER_GROUPS_PER_GPU = 3


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
    #: Who refuses a pool that is not a multiple, and where (file:line), for the message.
    cite: str = ""


# --------------------------------------------------------------------------- the job's batch

TRAIN_BATCH = "data.train_batch_size"
ROLLOUT_N = "actor_rollout_ref.rollout.n"
ACTOR_MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"
ACTOR_MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
ACTOR_MICRO_GLOBAL = "actor_rollout_ref.actor.ppo_micro_batch_size"
LOG_PROB_MICRO = "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"
LOG_PROB_GLOBAL = "actor_rollout_ref.rollout.log_prob_micro_batch_size"
REF_MICRO = "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"
REF_GLOBAL = "actor_rollout_ref.ref.log_prob_micro_batch_size"
CRITIC_MINI = "critic.ppo_mini_batch_size"
CRITIC_MICRO = "critic.ppo_micro_batch_size_per_gpu"
CRITIC_MICRO_GLOBAL = "critic.ppo_micro_batch_size"
CRITIC_FORWARD_GLOBAL = "critic.forward_micro_batch_size"
#: Every batch key the rules read (``placement.batch_rules``).
BATCH_KEYS: tuple[str, ...] = (
    TRAIN_BATCH,
    ROLLOUT_N,
    ACTOR_MINI,
    ACTOR_MICRO,
    ACTOR_MICRO_GLOBAL,
    LOG_PROB_MICRO,
    LOG_PROB_GLOBAL,
    REF_MICRO,
    REF_GLOBAL,
    CRITIC_MINI,
    CRITIC_MICRO,
    CRITIC_MICRO_GLOBAL,
    CRITIC_FORWARD_GLOBAL,
)
#: The batch keys whose change leaves the optimisation as it is: how many samples a GPU computes at once (every
#: key but the train batch, the samples per prompt and the mini-batches, which change the job itself).
MICRO_BATCH_KEYS = frozenset(BATCH_KEYS) - {TRAIN_BATCH, ROLLOUT_N, ACTOR_MINI, CRITIC_MINI}
#: The trainer paths whose batch rules differ: verl 0.9's v1 trainer and the ``RayPPOTrainer`` on the
#: engine workers ("v0"), and verl 0.7's legacy ``fsdp_workers`` ("legacy").
BATCH_RULES: tuple[str, ...] = ("v1", "v0", "legacy")


@dataclass(frozen=True)
class BatchConfig:
    """The run's batch sizes and which family's rules apply (built by ``placement.batch_config``)."""

    family: str  # "0.7", "0.8", "0.9"
    rules: str  # one of BATCH_RULES
    values: tuple[tuple[str, int | None], ...]  # config key -> value (None: unset)
    #: key -> the key its value follows (verl's critic.ppo_mini_batch_size is ${...actor.ppo_mini_batch_size}).
    followers: tuple[tuple[str, str], ...] = ()
    #: calls with dynamic batch sizes, so no micro-batch rule: "actor", "log_prob", "ref".
    dynamic: frozenset[str] = frozenset()
    #: role -> what divides its pool into data-parallel ranks (Ulysses, or Megatron tp x pp x cp).
    divisors: tuple[tuple[str, int], ...] = ()
    #: roles on verl 0.7's legacy Megatron workers: only the even-rows rule applies to them.
    megatron: frozenset[str] = frozenset()
    #: roles whose engine reports a data-parallel size of 1 (Megatron's dynamic context parallelism).
    single_dp: frozenset[str] = frozenset()
    #: role -> micro-batches per virtual-pipeline group (Megatron with VPP > 1: ``batch_vpp``).
    vpp_groups: tuple[tuple[str, int], ...] = ()

    def get(self, key: str) -> int | None:
        return dict(self.values).get(key)

    @property
    def n(self) -> int:
        return self.get(ROLLOUT_N) or 1

    @property
    def rows(self) -> int | None:
        """Samples in a step's batch: ``train_batch_size x rollout.n``."""
        batch = self.get(TRAIN_BATCH)
        return None if batch is None else batch * self.n

    def divisor(self, role: str) -> int:
        return dict(self.divisors).get(role, 1)

    def with_value(self, key: str, value: int) -> BatchConfig:
        """The same run with ``key`` (and every key that follows it) set to ``value``."""
        changed = {key} | {k for k, leader in self.followers if leader == key}
        values = tuple((k, value if k in changed else v) for k, v in self.values)
        return dataclasses.replace(self, values=values)

    def describe(self) -> str:
        trainer = {"v1": "v1 trainer", "v0": "RayPPOTrainer, engine workers", "legacy": "RayPPOTrainer, legacy workers"}
        return f"verl {self.family}, {trainer[self.rules]}"


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
    #: The job's batch sizes; None (a plan without a config) checks no batch rule.
    batch: BatchConfig | None = None
    #: The Megatron roles' meshes (``placement.megatron`` checks them against their pools).
    megatron: tuple[Mesh, ...] = ()
    #: The verl family whose rules apply ("0.7", "0.8", "0.9"); None: the newest.
    family: str | None = None
    #: A reference model runs (a KL term reads its log-probs); True where unknown (a plan without a config).
    reference: bool = True
    #: Why verl cannot run this job's reference in a worker group apart from the actor's; "" when it can.
    reference_bound: str = ""

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
    #: Seconds to wait for the pools' placement groups (``split_placement.ready_timeout_s``).
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    #: Rollout replicas on the critic's pool too, besides the actor's hybrid ones.
    shared_rollout: bool = False
    #: One line per Megatron role: its mesh on its pool (``placement.megatron.mesh_lines``), for the picture.
    meshes: tuple[str, ...] = ()

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
    def rollout_pools(self) -> tuple[Pool, ...]:
        """The pools whose GPUs generate: the actor's always, the critic's too with shared rollout."""
        actor = self.pool_of("actor")
        assert actor is not None  # every plan places the actor
        critic = self.pool_of("critic")
        if self.shared_rollout and critic is not None and critic.name != actor.name:
            return (actor, critic)
        return (actor,)

    @property
    def gpu_owner(self) -> dict[int, Pool]:
        return {gpu: pool for pool in self.pools for gpu in pool.gpus}

    @property
    def idle_gpus(self) -> tuple[int, ...]:
        owner = self.gpu_owner
        return tuple(g for g in range(self.cluster.n_gpus) if g not in owner)

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_pool_spec": self.resource_pool_spec,
            "mapping": self.mapping,
            "shared_rollout": self.shared_rollout,
        }
