"""Read each Megatron role's mesh from verl's trainer config: ``<role>.megatron.*``, for the job's view.

The Megatron part of ``placement.job_config`` (the one reader of verl's keys), which gives it the model's shape.
A role is Megatron when its ``strategy`` is ``megatron`` (the reference takes the actor's when it has none).
The keys are verl's engine block (``trainer/config/engine/megatron.yaml`` in 0.9.1, ``McoreEngineConfig`` in
``workers/config/engine.py``).
"""

from __future__ import annotations

from typing import Any

from verl_split.placement.config_keys import count_key, flag_key, present_key, select_key, text_key
from verl_split.placement.mesh import MESH_KEYS, Mesh, ModelShape

#: Where each role's training keys live, and its model.
ROLE_PREFIX = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}
MODEL_PREFIX = {"actor": "actor_rollout_ref.model", "ref": "actor_rollout_ref.model", "critic": "critic.model"}
#: ``override_transformer_config`` keys that split the layers another way than evenly over pp (and vpp);
#: megatron-core then checks its own split (``TransformerConfig.__post_init__`` in ``transformer_config.py``).
CUSTOM_SPLIT_KEYS = (
    "pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
)


def strategy_of(config: Any, role: str) -> str:
    strategy = text_key(config, f"{ROLE_PREFIX[role]}.strategy", "") or ""
    if role == "ref" and not strategy:
        strategy = text_key(config, "actor_rollout_ref.actor.strategy", "") or ""
    return strategy


def mesh_of(config: Any, role: str, shape: ModelShape) -> Mesh | None:
    """The role's Megatron mesh, or None when it is not a Megatron role; ``shape``: its model's."""
    if strategy_of(config, role) != "megatron":
        return None
    block = f"{ROLE_PREFIX[role]}.megatron"
    sizes: dict[str, Any] = {}
    for attr, key in MESH_KEYS:
        value = count_key(config, f"{block}.{key}")
        if value is None and role == "ref":  # verl's config: the reference's sizes follow the actor's (oc.select)
            value = count_key(config, f"{ROLE_PREFIX['actor']}.megatron.{key}")
        optional = attr in ("etp", "vpp")
        sizes[attr] = value if value is not None else (None if optional else 1)
    overrides = f"{block}.override_transformer_config"
    model = MODEL_PREFIX[role]
    return Mesh(
        role=role,
        prefix=block,
        dynamic_cp=flag_key(config, f"{block}.dynamic_context_parallel"),
        max_seqlen_per_dp_cp_rank=select_key(config, f"{block}.max_seqlen_per_dp_cp_rank"),
        remove_padding=flag_key(config, f"{model}.use_remove_padding", True),
        micro_group=count_key(config, f"{overrides}.microbatch_group_size_per_vp_stage"),
        # Kept as written: any value but false (a layout's text, a count, true) splits the layers another way,
        # and megatron-core checks that split itself.
        custom_layer_split=any(
            select_key(config, f"{overrides}.{key}") not in (None, False) for key in CUSTOM_SPLIT_KEYS
        ),
        param_offload=flag_key(config, f"{block}.param_offload"),
        optimizer_offload=flag_key(config, f"{block}.optimizer_offload"),
        distributed_optimizer=flag_key(config, f"{block}.use_distributed_optimizer", True),
        grad_bytes=_grad_bytes(config, role),
        shape=shape,
        **sizes,
    )


def _grad_bytes(config: Any, role: str) -> int:
    """The DDP grad buffer's dtype: fp32 unless the precision-aware optimizer keeps lower-precision main grads.

    verl sets ``grad_reduce_in_fp32`` so (``MegatronEngine._resolve_override_ddp_config`` in ``transformer_impl.py``);
    an explicit ``override_ddp_config.grad_reduce_in_fp32`` wins.
    """
    explicit = f"{ROLE_PREFIX[role]}.megatron.override_ddp_config.grad_reduce_in_fp32"
    if present_key(config, explicit):
        return 4 if flag_key(config, explicit) else 2
    optim = f"{ROLE_PREFIX[role]}.optim"
    low = flag_key(config, f"{optim}.use_precision_aware_optimizer") and (
        text_key(config, f"{optim}.main_grads_dtype", "fp32") or "fp32"
    ).lower() not in ("fp32", "float32")
    return 2 if low else 4
