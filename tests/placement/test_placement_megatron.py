"""Megatron's rules in the planner: refused before Ray, with the line that would refuse it and a fix.

Plain-dict configs planned as a run's launching process plans them (``plan_from_config``, which
``runtime/placement/hooks.check_config`` calls), on the installed verl's rules unless a family is named.
Model shapes come from a ``config.json`` written per test (no download).
"""

from __future__ import annotations

import json

import pytest
from support.nested import set_dotted

from verl_split.core.errors import PlacementError
from verl_split.placement import plan_from_config, plan_placement, render_plan, requirements_from_config

pytestmark = pytest.mark.unit

#: A small dense decoder (the shape only matters for layers and experts here).
DENSE = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 36,
         "num_key_value_heads": 8, "vocab_size": 32000}  # fmt: skip
MOE = {**DENSE, "num_hidden_layers": 48, "num_experts": 6, "moe_intermediate_size": 512}


def model(tmp_path, shape: dict, name: str = "model") -> str:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(shape))
    return str(folder)


def config(nnodes=1, per_node=8, placement="halves", actor=None, critic=None, path=None, **top):
    """A PPO run with Megatron actor and critic (``critic=False``: an FSDP critic)."""
    cfg = {
        "trainer": {"nnodes": nnodes, "n_gpus_per_node": per_node},
        "algorithm": {"adv_estimator": "gae"},
        "actor_rollout_ref": {
            "model": {"path": path},
            "actor": {"strategy": "megatron", "megatron": dict(actor or {})},
            "ref": {"megatron": dict(actor or {})},
            "rollout": {"tensor_model_parallel_size": 1},
        },
        "critic": {"strategy": "megatron", "model": {"path": path}, "megatron": dict(critic or {})},
        "split_placement": {"placement": placement},
    }
    if critic is False:
        cfg["critic"] = {"strategy": "fsdp", "model": {"path": path}, "fsdp": {}}
    for dotted, value in top.items():
        set_dotted(cfg, dotted, value, sep="__")
    return cfg


def refused(cfg, family=None) -> str:
    with pytest.raises(PlacementError) as exc:
        plan(cfg, family)
    return str(exc.value)


def plan(cfg, family=None):
    if family is None:
        return plan_from_config(cfg, "")
    from verl_split.placement import cluster_from_config, placement_from_config

    return plan_placement(
        placement_from_config(cfg, ""), cluster_from_config(cfg), requirements_from_config(cfg, family=family)
    )


TP = "tensor_model_parallel_size"
PP = "pipeline_model_parallel_size"
EP = "expert_model_parallel_size"
ETP = "expert_tensor_parallel_size"
VPP = "virtual_pipeline_model_parallel_size"
DCP = "dynamic_context_parallel"
#: verl's Megatron engine, where its refusals are cited (``core.citations``).
IMPL = "verl/workers/engine/megatron/transformer_impl.py"


# --------------------------------------------------------------------------- the plan shows each mesh


def test_the_picture_shows_each_pools_mesh_and_its_data_parallel_size():
    planned = plan(config(nnodes=2, actor={TP: 4, PP: 2}, critic={TP: 2}))  # halves: 8 GPUs a pool
    assert planned.meshes == (
        "actor: TP=4 x PP=2 x CP=1 on actor_rollout_ref_pool (8 GPUs): data-parallel 1",
        "critic: TP=2 x PP=1 x CP=1 on critic_pool (8 GPUs): data-parallel 4",
    )
    assert "Megatron meshes:\n  actor: TP=4 x PP=2" in render_plan(planned)
    fsdp_critic = plan(config(nnodes=2, actor={TP: 4}, critic=False))
    assert [line.split(":")[0] for line in fsdp_critic.meshes] == ["actor"]


def test_a_run_logs_each_mesh(capsys):
    nodes = pytest.importorskip("verl_split.runtime.placement.nodes")
    nodes.announce_plan(plan(config(nnodes=2, actor={TP: 4}, critic={TP: 2})))
    printed = capsys.readouterr().out
    assert "Megatron mesh: actor: TP=4 x PP=1 x CP=1 on actor_rollout_ref_pool (8 GPUs): data-parallel 2" in printed
    assert "Megatron mesh: critic: TP=2 x PP=1 x CP=1 on critic_pool (8 GPUs): data-parallel 4" in printed


# --------------------------------------------------------------------------- experts


def test_a_pool_not_a_multiple_of_etp_x_ep_x_pp_is_refused_with_what_fits():
    # ETP unset is TP: 4 x 2 x 2 = 16 does not divide the 8 GPUs of 'all'.
    actor = {TP: 4, PP: 2, EP: 2}
    message = refused(config(placement="all", actor=actor, critic=actor))
    assert "actor on global_pool (8 GPUs) is not a multiple of" in message
    assert "expert_tensor_parallel_size=null (TP: 4) x actor_rollout_ref.actor.megatron.expert_model" in message
    assert "raises RuntimeError on it (initialize_model_parallel in megatron/core/parallel_state.py, called" in message
    assert f"by verl's MegatronEngine._init_device_mesh in {IMPL}) when the pool's workers start" in message
    assert "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=2" in message
    assert "actor_rollout_ref.actor.megatron.expert_model_parallel_size=1" in message
    fixed = {**actor, ETP: 2}
    assert plan(config(placement="all", actor=fixed, critic=fixed)).resource_pool_spec == {"global_pool": [8]}


def test_split_placement_halves_the_pool_the_expert_rule_sees():
    actor = {TP: 2, PP: 2, EP: 4}  # 2 x 4 x 2 = 16 GPUs of experts per replica
    critic = {TP: 2}
    assert plan(config(nnodes=2, placement="all", actor=actor, critic=actor)).resource_pool_spec
    message = refused(config(nnodes=2, actor=actor, critic=critic))  # halves: 8 actor GPUs
    assert "actor on actor_rollout_ref_pool (8 GPUs) is not a multiple of" in message and "= 16" in message
    assert plan(config(nnodes=4, actor=actor, critic=critic)).resource_pool_spec == {
        "actor_rollout_ref_pool": [8, 8],
        "critic_pool": [8, 8],
    }


def test_routed_experts_must_split_over_ep(tmp_path):
    path = model(tmp_path, MOE)  # 6 experts
    message = refused(config(placement="all", actor={EP: 4}, critic=False, path=path))
    assert "its model's 6 routed experts do not split over actor_rollout_ref.actor.megatron" in message
    assert (
        "BaseMoELayer.__init__ in megatron/core/transformer/moe/moe_layer.py asserts it" in message
        and "expert_model_parallel_size=2" in message
    )
    assert plan(config(placement="all", actor={EP: 2}, critic=False, path=path))


def test_a_dense_model_takes_no_expert_parallelism(tmp_path):
    message = refused(config(placement="all", actor={EP: 2}, critic=False, path=model(tmp_path, DENSE)))
    assert "has no routed experts" in message
    assert "(TransformerConfig.__post_init__ in megatron/core/transformer/transformer_config.py raises" in message
    # A config that names experts under a key the planner does not know is a MoE of unknown count, not dense.
    odd = model(tmp_path, {**DENSE, "num_experts_per_tok": 2, "moe_layer_freq": 1}, "odd")
    assert plan(config(placement="all", actor={EP: 2}, critic=False, path=odd))


# --------------------------------------------------------------------------- virtual pipeline


@pytest.mark.parametrize("vpp", [1, 2])
def test_any_virtual_pipeline_size_needs_pipeline_parallelism(vpp):
    message = refused(config(actor={VPP: vpp}, critic=False))
    assert f"virtual_pipeline_model_parallel_size={vpp} with actor_rollout_ref.actor.megatron.pipeline" in message
    assert (
        "(initialize_model_parallel in megatron/core/parallel_state.py, called by verl's" in message
        and "virtual_pipeline_model_parallel_size=null" in message
    )


def test_a_virtual_pipeline_size_of_one_with_pipeline_parallelism_is_refused():
    # megatron-core would run its interleaved schedule with one virtual stage and refuse the micro-batch counts
    # verl's engine does not round for VPP 1 (code_review_3.md item 6: PP 2, VPP 1, 3 micro-batches was planned).
    message = refused(config(actor={PP: 2, VPP: 1}, critic=False))
    assert "virtual_pipeline_model_parallel_size=1 with actor_rollout_ref.actor.megatron.pipeline" in message
    assert "get_forward_backward_func" in message and "virtual_pipeline_model_parallel_size=null" in message
    assert plan(config(actor={PP: 2, VPP: None}, critic=False))


def test_layers_split_over_pipeline_and_virtual_stages(tmp_path):
    path = model(tmp_path, DENSE)  # 36 layers
    message = refused(config(placement="all", actor={PP: 8}, critic={PP: 8}, path=path))
    assert "36 layers do not split over actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=8" in message
    assert (
        "get_num_layers_to_build in megatron/core/transformer/transformer_block.py" in message
        and "pipeline_model_parallel_size=6 or 9" in message
    )
    mesh = {PP: 2, VPP: 4}
    message = refused(config(placement="all", actor=mesh, critic=mesh, path=path))
    assert "give each of 2 pipeline stages 18, which do not split into" in message
    assert (
        "get_num_layers_to_build in megatron/core/transformer/transformer_block.py" in message
        and "virtual_pipeline_model_parallel_size=3 or 6" in message
    )
    mesh = {PP: 2, VPP: 3}
    assert plan(config(placement="all", actor=mesh, critic=mesh, path=path))


def test_a_custom_layer_split_or_an_unknown_model_checks_no_layer_rule(tmp_path):
    uneven = {PP: 8, "override_transformer_config": {"num_layers_in_first_pipeline_stage": 1}}
    assert plan(config(placement="all", actor=uneven, critic=uneven, path=model(tmp_path, DENSE)))
    assert plan(config(placement="all", actor={PP: 8}, critic={PP: 8}, path=str(tmp_path / "nowhere")))


def test_a_vpp_rank_needs_whole_groups_of_micro_batches():
    # actor pool of 4 GPUs at PP=2: 2 ranks, 128 of the 256-sample mini-batch each.
    actor = {PP: 2, VPP: 2}
    batch = {"data__train_batch_size": 1024, "actor_rollout_ref__actor__ppo_mini_batch_size": 256}
    fits = config(actor=actor, critic=False, **batch, actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=64)
    assert plan(fits)  # 2 micro-batches of 64: one group of 2
    cfg = config(actor=actor, critic=False, **batch, actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=128)
    message = refused(cfg)
    assert "its update gives each of its 2 ranks 128 rows, 1 micro-batch of" in message
    assert "not a multiple of 2: with VPP > 1" in message
    assert "at MegatronEngine.forward_backward_batch in verl/workers/engine/megatron/transformer_impl.py." in message
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64" in message


def test_with_dynamic_batch_sizes_a_vpp_rank_needs_a_row_per_micro_batch():
    actor = {PP: 2, VPP: 2}
    cfg = config(
        actor=actor,
        critic=False,
        data__train_batch_size=64,
        actor_rollout_ref__actor__ppo_mini_batch_size=2,
        actor_rollout_ref__actor__use_dynamic_bsz=True,
    )
    message = refused(cfg)
    assert "its update gives each of its 2 ranks 1 rows with dynamic batch sizes" in message
    assert "get_seqlen_balanced_partitions in verl/utils/seqlen_balancing.py, after rearrange_micro_batches" in message


# --------------------------------------------------------------------------- one mesh per process


def test_roles_sharing_a_process_need_one_mesh():
    message = refused(config(placement="all", actor={TP: 2, PP: 2}, critic={TP: 4}))
    # Named in the order verl builds their engines: the critic's first, whose mesh the process then keeps.
    assert "critic, actor share the processes of global_pool" in message
    assert "verl's first engine there (critic's) sets it" in message
    assert "one worker process, create_colocated_worker_cls in verl/single_controller/ray/base.py, and" in message
    assert f"(MegatronEngine._init_device_mesh in {IMPL} returns when mpu.is_initialized())" in message
    assert "critic has TP=4 x PP=1 x CP=1; actor has TP=2 x PP=2 x CP=1" in message
    assert "critic.megatron.tensor_model_parallel_size=2, critic.megatron.pipeline_model_parallel_size=2" in message
    # Split placement is what lets them differ.
    assert plan(config(placement="halves", actor={TP: 2, PP: 2}, critic={TP: 4})).notes == ()


def test_a_critic_on_the_actors_mesh_is_noted():
    plan_ = plan(config(placement="all", actor={TP: 2}, critic={TP: 2}))
    (note,) = plan_.notes
    assert "the critic shares global_pool's processes with the actor" in note and "TP=2 x PP=1 x CP=1" in note


def test_the_reference_shares_the_actors_process():
    cfg = config(actor={TP: 2}, critic={TP: 2}, actor_rollout_ref__actor__use_kl_loss=True)
    cfg["actor_rollout_ref"]["ref"]["megatron"] = {TP: 4}
    assert "ref, actor share the processes of actor_rollout_ref_pool" in refused(cfg)
    cfg["actor_rollout_ref"]["actor"]["use_kl_loss"] = False  # no reference model built: nothing shared
    assert plan(cfg)


# --------------------------------------------------------------------------- dynamic context parallelism

#: 2 nodes at 6:2: the actor's 12 GPUs at TP=2 are 6 data-parallel ranks, which a 256-sample mini-batch
#: does not split over; with dynamic CP verl reports one data-parallel rank and takes it.
DCP_BATCH = {"data__train_batch_size": 1024, "actor_rollout_ref__actor__ppo_mini_batch_size": 256}


@pytest.mark.parametrize("family", ["0.9", "0.8"])
def test_dynamic_cp_reports_one_data_parallel_rank(family):
    plain = config(nnodes=2, placement="6:2", actor={TP: 2}, critic=False, **DCP_BATCH)
    assert "does not split over its 6 data-parallel ranks" in refused(plain, family)
    dcp = config(nnodes=2, placement="6:2", actor={TP: 2, DCP: True, "max_seqlen_per_dp_cp_rank": 4096},
                 critic=False, **DCP_BATCH)  # fmt: skip
    planned = plan(dcp, family)
    assert planned.resource_pool_spec == {"actor_rollout_ref_pool": [6, 6], "critic_pool": [2, 2]}
    assert "data-parallel 1 (dynamic context parallelism: verl reports 1)" in planned.meshes[0]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"max_seqlen_per_dp_cp_rank": None}, "(McoreEngineConfig.__post_init__ in verl/workers/config/engine.py"),
        ({"max_seqlen_per_dp_cp_rank": 0}, "verl needs a positive whole number of tokens there"),
        ({VPP: 2, PP: 2}, f"(_check_dcp_unsupported_features in {IMPL} raises NotImplementedError"),
        ({TP: 4}, f"(_validate_dcp_world_size in {IMPL} raises ValueError"),
        ({TP: 4}, "DP x CP = 4 / (TP=4 x PP=1) = 1, and verl needs an even number of at least 2"),
    ],
)
def test_what_verl_09_refuses_with_dynamic_cp(change, fragment):
    actor = {DCP: True, "max_seqlen_per_dp_cp_rank": 4096, **change}
    assert fragment in refused(config(actor=actor, critic=False))


def test_dynamic_cp_needs_packed_sequences_and_a_language_model():
    actor = {DCP: True, "max_seqlen_per_dp_cp_rank": 4096}
    cfg = config(actor=actor, critic=False, actor_rollout_ref__model__use_remove_padding=False)
    assert "actor_rollout_ref.model.use_remove_padding=true" in refused(cfg)
    message = refused(config(actor={TP: 1}, critic=actor))
    assert "the critic is a value model" in message and "_check_dcp_unsupported_features in" in message


def test_dynamic_cp_on_08_needs_only_its_sequence_budget():
    actor = {DCP: True, TP: 4}  # 0.8 has neither the even-DPxCP rule nor the value-model one
    message = refused(config(actor=actor, critic=False), "0.8")
    assert f"verl needs it set (MegatronEngine._init_device_mesh in {IMPL} asserts it is not None)" in message
    assert plan(config(actor={**actor, "max_seqlen_per_dp_cp_rank": 4096}, critic=False), "0.8")


def test_dynamic_cp_on_08_refuses_a_budget_it_cannot_divide_by():
    """0.8.0 asserts only that it is set, then divides by it in the first step (not a positive-integer rule)."""
    actor = {DCP: True, TP: 4, "max_seqlen_per_dp_cp_rank": 0}
    message = refused(config(actor=actor, critic=False), "0.8")
    assert "verl 0.8 checks only that it is set, then divides each batch's longest sequence by it" in message
    assert "(dynamic_cp_split_batch in verl/utils/megatron_utils.py)" in message
    assert "positive whole number" not in message


def test_a_later_engine_with_dynamic_cp_on_a_process_without_it_is_refused():
    # 'all' on 0.9: the critic's engine is built first, without dynamic CP; the actor's then raises.
    mesh = {TP: 2}
    actor = {**mesh, DCP: True, "max_seqlen_per_dp_cp_rank": 4096}
    message = refused(config(placement="all", actor=actor, critic=mesh))
    assert "actor sets dynamic_context_parallel=true and shares the processes of global_pool with the critic" in message
    assert f"raises RuntimeError (MegatronEngine._init_device_mesh in {IMPL}) when its workers start" in message
    assert "Set actor_rollout_ref.actor.megatron.dynamic_context_parallel=false, or give the critic a pool" in message


# --------------------------------------------------------------------------- tensor parallelism across nodes


def test_tp_groups_across_nodes_are_a_warning_not_a_refusal():
    plan_ = plan(config(nnodes=2, placement="6:2", actor={TP: 4}, critic={TP: 2}))
    (note,) = plan_.notes
    assert "actor's tensor-parallel groups of actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4" in note
    assert "has 6 GPUs on each of its 2 nodes" in note and "(e.g. 4:4)" in note and "a TP that divides 6" in note
    assert plan(config(nnodes=2, placement="4:4", actor={TP: 4}, critic={TP: 2})).notes == ()
    assert plan(config(nnodes=1, placement="6:2", actor={TP: 2}, critic={TP: 2})).notes == ()


def test_the_model_size_refusal_names_megatron_core():
    message = refused(config(placement="6:2", actor={TP: 4}, critic={TP: 2}))
    assert "not divisible by actor_rollout_ref.actor.megatron.tensor_model_parallel_size x pipeline x context=4" in (
        message
    )
    assert "megatron-core's initialize_model_parallel in megatron/core/parallel_state.py refuses it" in message


def test_the_launching_process_refuses_before_ray():
    from verl_split.core.errors import ActivationFailed
    from verl_split.runtime.placement.hooks import check_config

    actor = {TP: 4, PP: 2, EP: 2}
    with pytest.raises(
        ActivationFailed, match=r"initialize_model_parallel in megatron/core/parallel_state.py, called by"
    ):
        check_config(config(placement="all", actor=actor, critic=actor))


def test_verl_split_plan_refuses_it_too(capsys):
    from verl_split.tools import cli

    overrides = [
        "model_engine=megatron",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=8",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size=2",
        "critic.megatron.tensor_model_parallel_size=4",
        "critic.megatron.pipeline_model_parallel_size=2",
        "critic.megatron.expert_model_parallel_size=2",
        "+split_placement.placement=all",
    ]
    assert cli.main(["plan", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verl-split plan: split_placement.placement='all': actor on global_pool (8 GPUs)")
    assert "initialize_model_parallel in megatron/core/parallel_state.py" in err and "Traceback" not in err
