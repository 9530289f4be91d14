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
so ``rollout`` and ``ref`` follow the actor's group and may be left out; placing ``rollout`` elsewhere
is an error. ``ref`` may go to the critic's group (``actor,rollout:0-5;critic,ref:6-7``): the reference
then runs in a worker group of its own on the critic's pool, where verl can build one (``RayPPOTrainer``
without LoRA: ``verl_config.reference_bound`` names the cases it cannot, refused here). Roles sharing
one group are collocated (one pool); a GPU in two groups is an error.

What verl can build: its ``resource_pool_spec`` is a GPU *count* per node
(``verl/single_controller/ray/base.py`` ``RayResourcePool``: one STRICT_PACK placement group per
entry). A pool's explicit GPU set becomes the count of its GPUs on each node it touches, in node
order, and ``verl_split.runtime.placement.pools`` pins each count to its node. A pool must have the *same* count on
every node it touches: ``RayWorkerGroup._init_with_resource_pool`` (``base.py``, its
``local_world_size = resource_pool.store[0]``; ``core.citations`` pool_first_node_count) starts every node's
workers with the first node's count, so ``0-5,8-9`` -> ``[6, 2]`` fails an assertion and ``[2, 6]`` starts 4 of 8
workers that wait forever. The planner refuses such pools. Which device ids inside a node a pool
gets is Ray's choice: the ids within a node are labels of the picture, not a pinning.

The run's config is read once into a typed view of the job (``job``, read by ``job_config``: each role's
strategy, meshes and FSDP and Ulysses sizes, the batch, the rollout, the models' shapes, the cluster, the
``split_placement`` block); the requirements, the batch rules and the memory estimate read its fields.

The job's batch: every role's mini-batch (times ``rollout.n``), micro-batches and log-prob batches
must split over its pool's data-parallel ranks, by each family's rules (``batch_rules``, with
verl's file:line); a layout that breaks one is refused with the numbers, the nearest sizes and the
nearest layouts that fit (``batch``). The rules are read from the job's view
(``batch_config``); a plan without a config (``verl-split plan --placement 6:2``) checks none.

Megatron roles (``strategy: megatron``): each pool must also suit what megatron-core builds from its sizes
(ETP x EP x PP, experts per EP rank, VPP and the layers per stage, dynamic context parallelism), roles that
share a pool's processes share one mesh, and TP groups across nodes are noted (``megatron``, the sizes read by
``megatron_config`` into a ``mesh.Mesh``); VPP's micro-batch groups are a batch rule (``batch_vpp``).

Shared rollout (``split_placement.shared_rollout`` or ``VERL_SPLIT_SHARED_ROLLOUT``, off by default):
rollout replicas on the critic's pool too, beside the actor's hybrid ones (``Plan.rollout_pools``).
Checked before Ray starts: the critic has a pool of its own, holding whole replicas on every node
it touches and room for one more worker group per GPU (``plan_placement``); the run is on verl 0.8+,
the v1 trainer in sync mode or RayPPOTrainer with hybrid rollout, with LoRA merged
(``check_shared_rollout_run``); a critic-pool GPU has room for vLLM's share, the critic's training state
and the push's buffers, an actor-pool GPU for the push's buffers beside the actor's state (``memory``, the
formulas in its docstring; the states in ``train_state``).
"""

from verl_split.placement.batch_config import batch_from_config
from verl_split.placement.config_keys import select_key
from verl_split.placement.job import Job
from verl_split.placement.job_config import job_from_config
from verl_split.placement.model import (
    ACTOR_POOL,
    ACTOR_SIDE,
    CRITIC_POOL,
    DEFAULT_READY_TIMEOUT_S,
    GLOBAL_POOL,
    MAX_WORKER_GROUPS_PER_GPU,
    ROLES,
    BatchConfig,
    Cluster,
    GroupSpec,
    ParallelSize,
    Placement,
    Plan,
    Pool,
    Requirements,
)
from verl_split.placement.parse import DEFAULT_PLACEMENT, SHORTHANDS, parse_placement
from verl_split.placement.planner import plan_placement
from verl_split.placement.render import render_plan
from verl_split.placement.verl_config import (
    CONFIG_KEYS,
    SHARED_ROLLOUT_TRAINER_MODES,
    check_shared_rollout_run,
    cluster_from_config,
    placement_from_config,
    plan_from_config,
    ready_timeout_from_config,
    requirements_from_config,
    shared_rollout_from_config,
)

__all__ = [
    "ACTOR_POOL",
    "ACTOR_SIDE",
    "CONFIG_KEYS",
    "CRITIC_POOL",
    "DEFAULT_PLACEMENT",
    "DEFAULT_READY_TIMEOUT_S",
    "GLOBAL_POOL",
    "MAX_WORKER_GROUPS_PER_GPU",
    "ROLES",
    "SHARED_ROLLOUT_TRAINER_MODES",
    "SHORTHANDS",
    "BatchConfig",
    "Cluster",
    "GroupSpec",
    "Job",
    "ParallelSize",
    "Placement",
    "Plan",
    "Pool",
    "Requirements",
    "batch_from_config",
    "check_shared_rollout_run",
    "cluster_from_config",
    "job_from_config",
    "parse_placement",
    "placement_from_config",
    "plan_from_config",
    "plan_placement",
    "ready_timeout_from_config",
    "render_plan",
    "requirements_from_config",
    "select_key",
    "shared_rollout_from_config",
]
