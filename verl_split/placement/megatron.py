"""Megatron's rules on a plan: what megatron-core and verl's Megatron engine refuse once the workers start.

Each is refused here, before Ray starts, with the numbers, the function that would refuse it and a fix. Read
from megatron-core 0.16.1 and verl 0.9.1, 0.8.0 and 0.7.1; each function cited is a row of ``core.citations``
(named in brackets), checked against the installed release by ``tests/core/test_citations.py``;
``docs/configuration.md`` lists them.

* One mesh per process: verl fuses a pool's roles into one worker process (``create_colocated_worker_cls`` in
  ``single_controller/ray/base.py``; colocated_workers; the reference lives inside the actor's worker,
  ``ActorRolloutRefWorker.init_model`` in ``engine_workers.py``), and a process holds one megatron-core mesh:
  the first Megatron engine built sets it and every later one reuses it (``MegatronEngine._init_device_mesh``
  returns when ``mpu.is_initialized()``; megatron_mesh_reused), while each builds its model with its own sizes.
  The first is the critic's on the engine workers (its ``TrainingWorker`` builds its engine in its constructor,
  inside the ``WorkerDict``; the actor's engines come later, in ``init_model``, the reference's first, the v1
  trainer's ``PPOTrainer`` calling them in that order), the actor's on 0.7's legacy workers
  (``ActorRolloutRefWorker.__init__`` in ``megatron_workers.py`` initializes the mesh). So roles sharing a
  process must have the same sizes, else they are refused; with the same sizes the critic simply runs on the
  actor's mesh, which the plan says. Split placement is what lets the two differ.
* Experts: the pool must be a multiple of ETP x EP x PP (``initialize_model_parallel``; mc_expert_size; ETP
  unset is TP, mc_etp_default); a model's routed experts must split over EP (``BaseMoELayer.__init__``;
  mc_experts_over_ep) and a dense model takes no EP (``TransformerConfig.__post_init__``; mc_dense_no_ep).
* Virtual pipeline: any VPP needs PP > 1 (mc_vpp_needs_pp); the layers split evenly over PP and a stage's layers
  over VPP (``get_num_layers_to_build``; mc_layers_over_pp, mc_layers_over_vpp), checked when the model's
  ``config.json`` is readable and no custom split is set; a VPP group is at least PP micro-batches
  (``forward_backward_pipelining_with_interleaving``; mc_group_at_least_pp). Its batch rule is ``batch_vpp``.
* Dynamic context parallelism (0.8+): in ``placement.megatron_dcp``.
* Always true under verl, so not checked: the expert and dense pipeline groups agree and the rank order ends in
  ``pp`` (mc_pp_last: verl keeps the default order ``tp-cp-ep-dp-pp``, mc_default_order), EP and CP never meet
  in one rank generator (``RankGenerator.__init__``; mc_ep_cp_apart), and the distributed optimizer's instances
  divide the data-parallel sizes (mc_distopt_instances: verl passes none, so 1).
* Tensor parallelism across nodes: a warning, not a refusal (``_tp_across_nodes``).
"""

from __future__ import annotations

from collections.abc import Callable

from verl_split.core import compat
from verl_split.core.citations import cite
from verl_split.core.errors import PlacementError
from verl_split.placement.megatron_dcp import check_dynamic_cp, check_dynamic_cp_order
from verl_split.placement.mesh import ENGINE_ORDER, LEGACY_ORDER, Mesh
from verl_split.placement.model import Plan, Pool, Requirements

MODEL_SIZE_CITE = f"megatron-core's {cite('mc_model_size')} refuses it"
INIT = cite("megatron_init_mesh")
STARTS = "when the pool's workers start, after Ray has started"


def check_megatron(plan: Plan, req: Requirements, layouts: Callable[[], list[str]]) -> list[str]:
    """Refuse what megatron-core or verl would refuse after Ray starts; return the plan's notes (warnings)."""
    notes: list[str] = []
    where = f"{plan.source}={plan.placement!r}"
    family = req.family or compat.SUPPORTED_FAMILIES[-1]
    placed = [(mesh, plan.pool_of(mesh.role)) for mesh in req.megatron]
    for pool in plan.pools:
        shared = [m for m, p in placed if p is pool]
        notes += _one_mesh_per_process(where, pool, shared, family)
        check_dynamic_cp_order(where, pool, shared, family)
    for mesh, pool in placed:
        if pool is None or pool.size % mesh.model_size:
            continue  # no pool, or the model-size rule (check_parallel_sizes) already refused it
        _experts(where, mesh, pool, layouts)
        _pipeline(where, mesh)
        check_dynamic_cp(where, mesh, pool, family)
        notes += _tp_across_nodes(mesh, pool)
    return notes


def mesh_lines(plan: Plan, req: Requirements) -> tuple[str, ...]:
    """Each Megatron role's mesh on its pool and the data-parallel size verl's engine will report."""
    lines = []
    for mesh in req.megatron:
        pool = plan.pool_of(mesh.role)
        if pool is None:
            continue
        dp = mesh.data_parallel_size(pool.size)
        why = " (dynamic context parallelism: verl reports 1)" if mesh.dynamic_cp else ""
        lines.append(f"{mesh.role}: {mesh.describe()} on {pool.name} ({pool.size} GPUs): data-parallel {dp}{why}")
    return tuple(lines)


def _one_mesh_per_process(where: str, pool: Pool, meshes: list[Mesh], family: str) -> list[str]:
    if len(meshes) < 2:
        return []
    order = ENGINE_ORDER if compat.family_in(family, compat.ENGINE_WORKERS) else LEGACY_ORDER
    meshes = sorted(meshes, key=lambda m: order.index(m.role))
    first = meshes[0]
    for other in meshes[1:]:
        if other.sizes() != first.sizes():
            actor = next((m for m in meshes if m.role == "actor"), first)
            fixes = [
                f"{m.key(key)}={value}"
                for m in meshes
                if m is not actor
                for key, value, mine in _differences(actor, m)
                if value != mine
            ]
            raise PlacementError(
                f"{where}: {', '.join(m.role for m in meshes)} share the processes of {pool.name} (verl fuses a "
                f"pool's roles into one worker process, {cite('colocated_workers')}, and runs the reference inside "
                "the actor's worker), and a process has one Megatron mesh: verl's first engine there "
                f"({first.role}'s) sets it and every later one reuses it while building its model with its own "
                f"sizes ({cite('megatron_mesh_reused')} returns when mpu.is_initialized()). Here "
                + "; ".join(f"{m.role} has {m.describe()}" for m in meshes)
                + f". Give them the same sizes ({', '.join(fixes)}), or put the critic on a pool of its own "
                "(a split placement such as halves), where each role keeps its own mesh."
            )
    roles = {m.role for m in meshes}
    if "critic" not in roles:
        return []
    return [
        f"the critic shares {pool.name}'s processes with the {' and '.join(sorted(roles - {'critic'}))}, so one "
        f"Megatron mesh serves them all ({first.describe()}: verl builds one per process); split placement "
        "lets the critic's mesh differ from the actor's."
    ]


def _differences(want: Mesh, have: Mesh) -> list[tuple[str, object, object]]:
    names = (
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "virtual_pipeline_model_parallel_size",
    )
    wanted = (*want.sizes()[:4], want.etp, want.vpp)
    had = (*have.sizes()[:4], have.etp, have.vpp)
    values = [(name, w, h) for name, w, h in zip(names, wanted, had, strict=True)]
    if want.expert_tp == have.expert_tp:  # null and an explicit TP are the same mesh
        values = [v for v in values if v[0] != "expert_tensor_parallel_size"]
    return [(name, "null" if w is None else w, "null" if h is None else h) for name, w, h in values]


def _experts(where: str, mesh: Mesh, pool: Pool, layouts: Callable[[], list[str]]) -> None:
    head = f"{where}: {mesh.role} on {pool.name} ({pool.size} GPUs)"
    experts = mesh.shape.experts
    ep_key = mesh.key("expert_model_parallel_size")
    if mesh.ep > 1 and experts == 0:
        raise PlacementError(
            f"{head} sets {ep_key}={mesh.ep}, but its model has no routed experts (its config.json), and "
            f"megatron-core refuses expert parallelism on a dense model ({cite('mc_dense_no_ep')} raises "
            f"ValueError) {STARTS}. Set {ep_key}=1."
        )
    if experts and experts % mesh.ep:
        fits = [
            ep for ep in range(1, experts + 1) if experts % ep == 0 and pool.size % (mesh.expert_tp * ep * mesh.pp) == 0
        ]
        raise PlacementError(
            f"{head}: its model's {experts} routed experts do not split over {ep_key}={mesh.ep} "
            f"(megatron-core's {cite('mc_experts_over_ep')} asserts it {STARTS})."
            + (f" Fits: {ep_key}={' or '.join(str(e) for e in _nearest(fits, mesh.ep))}." if fits else "")
        )
    if pool.size % mesh.expert_size == 0:
        return
    etp_key = mesh.key("expert_tensor_parallel_size")
    etp = f"{etp_key}={mesh.etp}" if mesh.etp is not None else f"{etp_key}=null (TP: {mesh.tp})"
    product = f"{etp} x {ep_key}={mesh.ep} x pipeline_model_parallel_size={mesh.pp} = {mesh.expert_size}"
    fixes = []
    etps = [e for e in range(1, pool.size + 1) if pool.size % (e * mesh.ep * mesh.pp) == 0]
    if etps:
        fixes.append(f"{etp_key}={' or '.join(str(e) for e in _nearest(etps, mesh.expert_tp))}")
    eps = [e for e in range(1, pool.size + 1) if pool.size % (mesh.expert_tp * e * mesh.pp) == 0]
    eps = [e for e in eps if not experts or experts % e == 0]
    if eps:
        fixes.append(f"{ep_key}={' or '.join(str(e) for e in _nearest(eps, mesh.ep))}")
    fixes.append(f"a pool of a multiple of {mesh.expert_size} GPUs")
    fits = layouts()
    if fits:
        fixes.append(f"a layout such as {' or '.join(fits)}")
    raise PlacementError(
        f"{head} is not a multiple of {product}: megatron-core's initialize_model_parallel raises RuntimeError on it "
        f"({cite('mc_expert_size')}, called by verl's {INIT}) {STARTS}. Fits: {', or '.join(fixes)}."
    )


def _pipeline(where: str, mesh: Mesh) -> None:
    head = f"{where}: {mesh.role}"
    pp_key, vpp_key = mesh.key("pipeline_model_parallel_size"), mesh.key("virtual_pipeline_model_parallel_size")
    if mesh.vpp is not None and mesh.pp <= 1:
        raise PlacementError(
            f"{head} sets {vpp_key}={mesh.vpp} with {pp_key}={mesh.pp}: megatron-core's initialize_model_parallel "
            f"raises RuntimeError for any virtual pipeline size without pipeline parallelism "
            f"({cite('mc_vpp_needs_pp')}, called by verl's {INIT}) {STARTS}. Set {vpp_key}=null, "
            f"or {pp_key} above 1."
        )
    if mesh.vpp == 1:
        raise PlacementError(
            f"{head} sets {vpp_key}=1 with {pp_key}={mesh.pp}: megatron-core runs its interleaved schedule whenever a "
            f"virtual pipeline size is set ({cite('mc_interleaved_schedule')}), here with one virtual stage, so "
            "nothing interleaves, yet its micro-batch group rule applies (forward_backward_pipelining_with_"
            "interleaving raises ValueError when a rank's micro-batches are not whole groups of the pipeline size), "
            "and verl's Megatron engine rounds the count to groups only for a virtual pipeline size above 1 "
            f"({cite('vpp_groups_above_1')}). Set {vpp_key}=null for the plain pipeline schedule, or 2 or more to "
            "interleave."
        )
    if mesh.interleaved and mesh.group < mesh.pp:
        group_key = mesh.key("override_transformer_config.microbatch_group_size_per_vp_stage")
        raise PlacementError(
            f"{head} sets {group_key}={mesh.group}, below {pp_key}={mesh.pp}: megatron-core's interleaved schedule "
            f"raises ValueError on the first step ({cite('mc_group_at_least_pp')}). "
            f"Set it to at least {mesh.pp}, or remove it."
        )
    layers = mesh.shape.layers
    if layers is None or mesh.custom_layer_split or mesh.pp <= 1:
        return
    if layers % mesh.pp:
        fits = [p for p in range(1, layers + 1) if layers % p == 0]
        raise PlacementError(
            f"{head}: its model's {layers} layers do not split over {pp_key}={mesh.pp} "
            f"(megatron-core's {cite('mc_layers_over_pp')} asserts it when the model is built, "
            f"{STARTS}). Set {pp_key}={' or '.join(str(p) for p in _nearest(fits, mesh.pp))}, or split the layers "
            "yourself (override_transformer_config.num_layers_in_first_pipeline_stage / _last_)."
        )
    per_stage = layers // mesh.pp
    if mesh.interleaved and per_stage % mesh.vpp:  # type: ignore[operator]
        fits = [v for v in range(2, per_stage + 1) if per_stage % v == 0]
        fix = f"{vpp_key}={' or '.join(str(v) for v in _nearest(fits, mesh.vpp or 1))}, or " if fits else ""
        raise PlacementError(
            f"{head}: its model's {layers} layers give each of {mesh.pp} pipeline stages {per_stage}, which do not "
            f"split into {vpp_key}={mesh.vpp} virtual stages (megatron-core's {cite('mc_layers_over_vpp')} asserts "
            f"it when the model is built, {STARTS}). Set {fix}{vpp_key}=null."
        )


def _tp_across_nodes(mesh: Mesh, pool: Pool) -> list[str]:
    """A warning: TP groups that straddle nodes run, slowly (every layer all-reduces over the network).

    Not refused: verl and megatron-core run it, and a model whose TP must exceed a node's GPUs has no other
    way. megatron-core numbers ranks TP first (its default order ``tp-cp-ep-dp-pp``; citations mc_default_order)
    and verl a pool's workers node by node, so a TP group stays in a node exactly when the pool's GPUs per node
    are a multiple of TP.
    """
    per_node = pool.process_on_nodes[0]
    if len(pool.nodes) < 2 or mesh.tp <= 1 or per_node % mesh.tp == 0:
        return []
    return [
        f"{mesh.role}'s tensor-parallel groups of {mesh.key('tensor_model_parallel_size')}={mesh.tp} GPUs straddle "
        f"nodes: {pool.name} has {per_node} GPUs on each of its {len(pool.nodes)} nodes, and megatron-core groups "
        "ranks TP first while verl numbers a pool's workers node by node, so every layer's all-reduce of some "
        f"groups crosses the network. verl runs it, slowly: give that side a multiple of {mesh.tp} GPUs per node"
        f"{_tp_ratio(pool, mesh.tp)}, or a TP that divides {per_node}."
    ]


def _tp_ratio(pool: Pool, tp: int) -> str:
    """``" (e.g. 4:4)"``: a split of a node whose side of this pool holds whole TP groups; empty for a shared pool."""
    per_node, now = pool.n_gpus_per_node, pool.process_on_nodes[0]
    sides = range(tp, per_node, tp)  # whole TP groups, and a GPU left for the other side
    if ("actor" in pool.roles) == ("critic" in pool.roles) or not sides:
        return ""
    side = min(sides, key=lambda s: (abs(s - now), s))
    return f" (e.g. {side}:{per_node - side})" if "actor" in pool.roles else f" (e.g. {per_node - side}:{side})"


def _nearest(values: list[int], current: int) -> list[int]:
    """The value just below ``current`` and the one just above, from those that fit."""
    below = [v for v in values if v < current][-1:]
    above = [v for v in values if v > current][:1]
    return below + above
