"""Megatron's dynamic context parallelism (``<role>.megatron.dynamic_context_parallel``, verl 0.8+): its rules.

verl's engine then reports one data-parallel rank (``MegatronEngine.get_data_parallel_size`` in
``workers/engine/megatron/transformer_impl.py``; citations dcp_data_parallel_size): every DPxCP rank gets the
whole batch and a scheduler splits it. The batch rules use that size (``batch_config`` marks the role), so a
layout verl accepts is not refused for a data-parallel size verl does not use. What verl refuses with it, once
the workers start (each a row of ``core.citations``, named in brackets):

* ``max_seqlen_per_dp_cp_rank``: 0.9, a positive integer (``McoreEngineConfig.__post_init__`` in
  ``workers/config/engine.py``; dcp_seqlen_positive); 0.8.0 asserts only that it is set
  (``MegatronEngine._init_device_mesh``; dcp_seqlen_set), then divides each batch's longest sequence by it in
  the first step (``dynamic_cp_split_batch`` in ``utils/megatron_utils.py``; dcp_seqlen_divides), so a value
  of 0 or below fails there, after a whole generation;
* 0.9: not for a value model, hence not the critic, ``use_remove_padding`` on, no virtual pipeline above 1
  (``_check_dcp_unsupported_features``; dcp_language_models, dcp_remove_padding, dcp_no_vpp); the pool over
  TP x PP an even number of at least 2 (``_validate_dcp_world_size``, called by ``_init_device_mesh``;
  dcp_world_size);
* 0.9: in a process shared by several Megatron engines, the first one built must have it when a later one does
  (``_init_device_mesh``; dcp_same_in_process; the order: ``mesh.ENGINE_ORDER``).

Not checked: whether the installed megatron-core has it (verl asserts ``initialize_model_parallel`` takes it in
``_init_device_mesh``, dcp_megatron_support; megatron-core 0.16.1 does not).
"""

from __future__ import annotations

from verl_split.core import compat
from verl_split.core.citations import cite
from verl_split.core.errors import PlacementError
from verl_split.placement.mesh import ENGINE_ORDER, Mesh
from verl_split.placement.model import Pool

STARTS = "when its workers start, after Ray has started"


def check_dynamic_cp(where: str, mesh: Mesh, pool: Pool, family: str) -> None:
    if not mesh.dynamic_cp or not compat.family_in(family, compat.ENGINE_WORKERS):
        return  # 0.7 has no dynamic context parallelism
    head = f"{where}: {mesh.role} sets {mesh.key('dynamic_context_parallel')}=true"
    seqlen_key = mesh.key("max_seqlen_per_dp_cp_rank")
    problem = _seqlen_problem(mesh.max_seqlen_per_dp_cp_rank, family)
    if problem:
        raise PlacementError(
            f"{head} with {seqlen_key}={mesh.max_seqlen_per_dp_cp_rank!r}: {problem}. Set {seqlen_key}, e.g. to "
            "the rollout's prompt + response length."
        )
    if not compat.family_in(family, compat.V1_TRAINER):
        return
    if mesh.role == "critic":
        raise PlacementError(
            f"{head}: verl 0.9 runs dynamic context parallelism for language models only, and the critic is a "
            f"value model ({cite('dcp_language_models')} raises NotImplementedError {STARTS}). Set it to false "
            "for the critic (critic.megatron.context_parallel_size still splits long sequences)."
        )
    if not mesh.remove_padding:
        raise PlacementError(
            f"{head} with {_model_key(mesh)}.use_remove_padding=false: verl needs packed sequences for it "
            f"({cite('dcp_remove_padding')} raises ValueError {STARTS}). Set "
            f"{_model_key(mesh)}.use_remove_padding=true."
        )
    if mesh.vpp not in (None, 1):
        vpp_key = mesh.key("virtual_pipeline_model_parallel_size")
        raise PlacementError(
            f"{head} with {vpp_key}={mesh.vpp}: verl does not run it with a virtual pipeline "
            f"({cite('dcp_no_vpp')} raises NotImplementedError {STARTS}). Set {vpp_key}=null, or "
            "dynamic_context_parallel=false."
        )
    dpcp = pool.size // (mesh.tp * mesh.pp)
    if dpcp < 2 or dpcp % 2:
        raise PlacementError(
            f"{head}: {pool.name} has {pool.size} GPUs, so DP x CP = {pool.size} / (TP={mesh.tp} x PP={mesh.pp}) = "
            f"{dpcp}, and verl needs an even number of at least 2 there ({cite('dcp_world_size')} raises "
            f"ValueError {STARTS}). Give the pool a multiple of {2 * mesh.tp * mesh.pp} GPUs, or lower "
            f"{mesh.key('tensor_model_parallel_size')} or {mesh.key('pipeline_model_parallel_size')}."
        )


def check_dynamic_cp_order(where: str, pool: Pool, meshes: list[Mesh], family: str) -> None:
    """0.9: in a shared process, a later engine with dynamic CP on a mesh built without it is an error."""
    if not compat.family_in(family, compat.V1_TRAINER) or len(meshes) < 2:
        return
    first, *later = sorted(meshes, key=lambda m: ENGINE_ORDER.index(m.role))
    late = [m for m in later if m.dynamic_cp]
    if first.dynamic_cp or not late:
        return
    one = len(late) == 1
    if first.role == "critic":  # 0.9 runs no value model with dynamic CP: only a pool of its own helps
        fix = f"Set {', '.join(m.key('dynamic_context_parallel') for m in late)}=false"
    else:
        fix = f"Set {first.key('dynamic_context_parallel')}=true too"
    raise PlacementError(
        f"{where}: {', '.join(m.role for m in late)} {'sets' if one else 'set'} dynamic_context_parallel=true and "
        f"{'shares' if one else 'share'} the processes of {pool.name} with the {first.role}, whose Megatron engine "
        "verl builds first and without it; the later engine then finds the process's mesh without dynamic DPxCP "
        f"groups and raises RuntimeError ({cite('dcp_same_in_process')}) {STARTS}. {fix}, or give the critic a pool "
        "of its own (a split placement such as halves)."
    )


def _seqlen_problem(value: object, family: str) -> str:
    """Why verl refuses this ``max_seqlen_per_dp_cp_rank``, and where; empty when it takes it."""
    if compat.family_in(family, compat.V1_TRAINER):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return ""
        where = cite("dcp_seqlen_positive")
        return f"verl needs a positive whole number of tokens there ({where} raises ValueError) {STARTS}"
    if value is None:
        return f"verl needs it set ({cite('dcp_seqlen_set')} asserts it is not None) {STARTS}"
    if isinstance(value, (int, float)) and value > 0:
        return ""
    return (
        f"verl 0.8 checks only that it is set, then divides each batch's longest sequence by it "
        f"({cite('dcp_seqlen_divides')}), which fails for a value that is not a number above 0 in the first step, "
        "after a whole generation"
    )


def _model_key(mesh: Mesh) -> str:
    return "critic.model" if mesh.role == "critic" else "actor_rollout_ref.model"
