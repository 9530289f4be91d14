"""The split-placement planner: reference/001's strategies, odd counts, explicit ranges, validation."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from verl_split.core.errors import PlacementError
from verl_split.placement import (
    ACTOR_POOL,
    CRITIC_POOL,
    GLOBAL_POOL,
    ROLES,
    Cluster,
    ParallelSize,
    Requirements,
    parse_placement,
    placement_from_config,
    plan_from_config,
    plan_placement,
    render_plan,
    requirements_from_config,
)

pytestmark = pytest.mark.unit

PPO = Requirements()
PPO_RM = Requirements(reward=True)
GRPO = Requirements(critic=False, critic_reason="algorithm.adv_estimator=grpo")
#: No KL term: no reference runs; a reference verl keeps in the actor's worker (verl_config.reference_bound).
NO_REF = Requirements(reference=False)
REF_BOUND = Requirements(reference_bound="verl's v1 trainer keeps the reference inside the actor's hybrid worker")


def spec(placement: str, nnodes: int, per_node: int, req: Requirements = PPO) -> dict[str, list[int]]:
    return plan_placement(placement, Cluster(nnodes, per_node), req).resource_pool_spec


# --------------------------------------------------------------------------- reference/001's strategies


def test_one_node_of_8_splits_in_halves():
    plan = plan_placement("halves", Cluster(1, 8), PPO_RM)
    assert plan.resource_pool_spec == {ACTOR_POOL: [4], CRITIC_POOL: [4]}
    assert plan.pool(ACTOR_POOL).gpus == (0, 1, 2, 3)
    assert plan.pool(CRITIC_POOL).gpus == (4, 5, 6, 7)
    assert plan.mapping == {
        "actor": ACTOR_POOL,
        "rollout": ACTOR_POOL,
        "ref": ACTOR_POOL,
        "critic": CRITIC_POOL,
        "reward": CRITIC_POOL,
    }


def test_two_nodes_split_per_node():
    plan = plan_placement("per-node", Cluster(2, 8), PPO)
    assert plan.resource_pool_spec == {ACTOR_POOL: [4, 4], CRITIC_POOL: [4, 4]}
    assert plan.pool(ACTOR_POOL).gpus == (0, 1, 2, 3, 8, 9, 10, 11)
    assert plan.pool(ACTOR_POOL).nodes == (0, 1) == plan.pool(CRITIC_POOL).nodes
    assert spec("4:4", 2, 8) == {ACTOR_POOL: [4, 4], CRITIC_POOL: [4, 4]}


def test_two_nodes_split_per_node_group():
    plan = plan_placement("halves", Cluster(2, 8), PPO)
    assert plan.resource_pool_spec == {ACTOR_POOL: [8], CRITIC_POOL: [8]}
    assert plan.pool(ACTOR_POOL).nodes == (0,)
    assert plan.pool(CRITIC_POOL).nodes == (1,)
    assert spec("per-group", 2, 8) == spec("halves", 2, 8)


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [("6:2", {ACTOR_POOL: [6, 6], CRITIC_POOL: [2, 2]}), ("3:5", {ACTOR_POOL: [3, 3], CRITIC_POOL: [5, 5]})],
)
def test_asymmetric_ratios(ratio, expected):
    assert spec(ratio, 2, 8) == expected


def test_ratio_may_leave_gpus_idle_and_shows_them():
    plan = plan_placement("4:2", Cluster(1, 8), PPO)
    assert plan.idle_gpus == (6, 7)
    assert "idle" in render_plan(plan)


def test_all_is_the_stock_layout():
    plan = plan_placement("all", Cluster(2, 8), PPO_RM)
    assert plan.resource_pool_spec == {GLOBAL_POOL: [8, 8]}
    assert set(plan.mapping.values()) == {GLOBAL_POOL}
    assert set(plan.mapping) == set(ROLES)


# --------------------------------------------------------------------------- odd counts: no idle GPU


@pytest.mark.parametrize("nnodes", [3, 5, 7])
def test_odd_node_counts_give_the_extra_node_to_the_actor(nnodes):
    plan = plan_placement("halves", Cluster(nnodes, 8), PPO)
    assert plan.resource_pool_spec == {ACTOR_POOL: [8] * (nnodes // 2 + 1), CRITIC_POOL: [8] * (nnodes // 2)}
    assert plan.idle_gpus == ()  # the seed recipe left a node idle here


@pytest.mark.parametrize(("per_node", "actor", "critic"), [(7, 4, 3), (3, 2, 1), (5, 3, 2)])
def test_odd_gpu_counts_give_the_extra_gpu_to_the_actor(per_node, actor, critic):
    assert spec("halves", 1, per_node) == {ACTOR_POOL: [actor], CRITIC_POOL: [critic]}
    assert spec("per-node", 2, per_node) == {ACTOR_POOL: [actor] * 2, CRITIC_POOL: [critic] * 2}


def test_grpo_halves_falls_back_to_one_pool_with_a_note():
    plan = plan_placement("halves", Cluster(2, 8), GRPO)
    assert plan.resource_pool_spec == {GLOBAL_POOL: [8, 8]}
    assert "critic" not in plan.mapping
    assert plan.notes and "nothing to split" in plan.notes[0]


# --------------------------------------------------------------------------- explicit ranges


def test_explicit_ranges_within_one_node():
    plan = plan_placement("actor,rollout,ref:0-5;critic,reward:6-7", Cluster(1, 8), PPO_RM)
    assert plan.resource_pool_spec == {ACTOR_POOL: [6], CRITIC_POOL: [2]}
    assert plan.mapping["reward"] == CRITIC_POOL


@pytest.mark.parametrize(
    ("placement", "verdict"),
    [
        ("actor:0-5,8-9;critic:6-7,10-15", "with [6, 2] it fails an assertion (6 workers on a node with 2 GPUs)"),
        ("actor:0-1,8-13;critic:2-7,14-15", "with [2, 6] it starts 4 of 8 workers, which wait forever for the others"),
    ],
)
def test_a_pool_with_different_counts_on_its_nodes_is_refused(placement, verdict):
    # verl's RayWorkerGroup uses the first node's count for every node (citations pool_first_node_count).
    with pytest.raises(PlacementError) as exc:
        plan_placement(placement, Cluster(2, 8), PPO)
    message = str(exc.value)
    assert "actor_rollout_ref_pool would have " in message and verdict in message, message
    assert "(RayWorkerGroup._init_with_resource_pool in verl/single_controller/ray/base.py)" in message
    assert "same number of GPUs on every node it uses, e.g. " in message


def test_uneven_per_node_error_names_the_counts():
    with pytest.raises(PlacementError, match=r"would have 6 GPUs on node 0 and 2 on node 1\. verl starts"):
        plan_placement("actor:0-5,8-9;critic:6-7,10-15", Cluster(2, 8), PPO)


@pytest.mark.parametrize(
    ("placement", "cluster", "hint"),
    [
        # 8 + 8 GPUs asked: 4:4 keeps the share (the first node's 6:2 would give the actor 12 of 16).
        ("actor:0-5,8-9;critic:6-7,10-15", Cluster(2, 8), "e.g. 4:4."),
        ("actor:0-1,8-13;critic:2-7,14-15", Cluster(2, 8), "e.g. 4:4."),
        # 10 + 6 asked: 5:3 on each node keeps 10 + 6.
        ("actor:0-6,8-10;critic:7,11-15", Cluster(2, 8), "e.g. 5:3."),
        # 12 + 12 over three nodes: 4:4 on each.
        ("actor:0-11;critic:12-23", Cluster(3, 8), "e.g. 4:4."),
        # 8 + 4 asked, 4 GPUs left idle: 4:2 on each node keeps both counts.
        ("actor:0-5,8-9;critic:6-7,10-11", Cluster(2, 8), "e.g. 4:2."),
    ],
)
def test_the_uneven_per_node_hint_keeps_the_share_of_gpus_asked(placement, cluster, hint):
    with pytest.raises(PlacementError) as exc:
        plan_placement(placement, cluster, PPO)
    assert str(exc.value).endswith(f"Give the pool the same number of GPUs on every node it uses, {hint}")


def test_explicit_ranges_across_nodes_with_even_counts_still_plan():
    plan = plan_placement("actor:0-5,8-13;critic:6-7,14-15", Cluster(2, 8), PPO)
    assert plan.resource_pool_spec == {ACTOR_POOL: [6, 6], CRITIC_POOL: [2, 2]}
    assert plan.mapping["rollout"] == plan.mapping["ref"] == ACTOR_POOL  # they follow the actor


def test_explicit_group_spanning_whole_nodes():
    plan = plan_placement("actor,rollout,ref:0-15;critic:16-23", Cluster(3, 8), PPO)
    assert plan.resource_pool_spec == {ACTOR_POOL: [8, 8], CRITIC_POOL: [8]}
    assert plan.pool(CRITIC_POOL).nodes == (2,)


def test_explicit_non_contiguous_gpus_keep_their_ids():
    plan = plan_placement("actor:0,2,4,6;critic:1,3,5,7", Cluster(1, 8), PPO)
    assert plan.pool(ACTOR_POOL).gpus == (0, 2, 4, 6)
    assert plan.resource_pool_spec == {ACTOR_POOL: [4], CRITIC_POOL: [4]}


def test_roles_in_one_group_are_collocated_in_one_pool():
    plan = plan_placement("actor,rollout,ref,critic:all", Cluster(1, 4), PPO)
    assert plan.resource_pool_spec == {GLOBAL_POOL: [4]}


def test_structured_groups_match_the_shorthand():
    groups = [{"roles": ["actor", "rollout", "ref"], "gpus": "0-5"}, {"roles": "critic,reward", "gpus": [6, 7]}]
    assert plan_placement(groups, Cluster(1, 8), PPO_RM).resource_pool_spec == spec(
        "actor,rollout,ref:0-5;critic,reward:6-7", 1, 8, PPO_RM
    )


def test_whitespace_and_case_are_forgiven():
    assert spec(" Actor , ROLLOUT : 0 - 3 ; critic : 4-7 ", 1, 8) == {ACTOR_POOL: [4], CRITIC_POOL: [4]}
    assert spec(" HALVES ", 1, 8) == {ACTOR_POOL: [4], CRITIC_POOL: [4]}


def test_render_fits_100_columns_for_two_nodes_of_8():
    for placement in ("halves", "per-node", "all", "actor:0-5,8-13;critic,reward:6-7,14-15"):
        text = render_plan(plan_placement(placement, Cluster(2, 8), PPO_RM))
        picture = text.split("\n\n")[1]
        assert max(len(line) for line in picture.splitlines()) <= 100, picture
        assert "node 1" in picture and "resource_pool_spec" in text


# --------------------------------------------------------------------------- from verl's config


def verl_like(**overrides):
    base = {
        "trainer": {"nnodes": 1, "n_gpus_per_node": 8},
        "algorithm": {"adv_estimator": "gae"},
        "critic": {"enable": None, "ulysses_sequence_parallel_size": 1, "fsdp": {"fsdp_size": -1}},
        "actor_rollout_ref": {
            "rollout": {"tensor_model_parallel_size": 2, "data_parallel_size": 1, "pipeline_model_parallel_size": 1},
            "actor": {"ulysses_sequence_parallel_size": 1, "fsdp_config": {"fsdp_size": -1}, "strategy": "fsdp"},
            "ref": {"ulysses_sequence_parallel_size": "${actor_rollout_ref.actor.ulysses_sequence_parallel_size}"},
        },
        "reward": {"reward_model": {"enable": False, "enable_resource_pool": False}},
    }
    config = OmegaConf.create(base)
    for key, value in overrides.items():
        OmegaConf.update(config, key.replace("__", "."), value, force_add=True)
    return config


def test_requirements_follow_verls_need_critic_rule():
    assert requirements_from_config(verl_like()).critic
    assert not requirements_from_config(verl_like(algorithm__adv_estimator="grpo")).critic
    assert requirements_from_config(verl_like(algorithm__adv_estimator="grpo", critic__enable=True)).critic
    assert not requirements_from_config(verl_like(critic__enable=False)).critic
    rm = requirements_from_config(verl_like(reward__reward_model__enable=True))
    assert rm.reward and not rm.reward_own_pool
    own = requirements_from_config(
        verl_like(reward__reward_model__enable=True, reward__reward_model__enable_resource_pool=True)
    )
    assert own.reward_own_pool and not own.reward


def test_requirements_read_parallel_sizes_through_interpolations():
    req = requirements_from_config(verl_like(actor_rollout_ref__actor__ulysses_sequence_parallel_size=4))
    keys = {p.key: p.size for p in req.parallel}
    assert keys["actor_rollout_ref.actor.ulysses_sequence_parallel_size"] == 4
    assert keys["actor_rollout_ref.ref.ulysses_sequence_parallel_size"] == 4
    assert any(p.role == "rollout" and p.size == 2 for p in req.parallel)


def test_requirements_from_plain_dicts():
    req = requirements_from_config({"algorithm": {"adv_estimator": "grpo"}})
    assert not req.critic and req.parallel == ()


def test_config_wins_over_the_environment():
    config = verl_like(split_placement={"placement": "6:2"})
    assert placement_from_config(config, "3:5").text == "6:2"
    assert placement_from_config(verl_like(), "3:5").text == "3:5"
    assert placement_from_config(verl_like(), None).text == "halves"
    assert plan_from_config(config, "3:5").resource_pool_spec == {ACTOR_POOL: [6], CRITIC_POOL: [2]}


def test_config_groups():
    config = verl_like(
        split_placement={"groups": [{"roles": ["actor"], "gpus": "0-3"}, {"roles": ["critic"], "gpus": "4-7"}]}
    )
    assert plan_from_config(config, "").resource_pool_spec == {ACTOR_POOL: [4], CRITIC_POOL: [4]}


def test_real_verl_config_plans(verl_config):
    plan = plan_from_config(verl_config, "")
    assert plan.resource_pool_spec == {ACTOR_POOL: [4], CRITIC_POOL: [4]}


@pytest.fixture(scope="module")
def verl_config():
    from verl_split.tools.plan import compose_config

    return compose_config("ppo_trainer", None, ["trainer.n_gpus_per_node=8"])


# --------------------------------------------------------------------------- the validation battery

C18, C28 = Cluster(1, 8), Cluster(2, 8)
TP2 = Requirements(parallel=(ParallelSize("rollout", 2, "actor_rollout_ref.rollout.tensor_model_parallel_size", True),))
TP4 = Requirements(parallel=(ParallelSize("rollout", 4, "actor_rollout_ref.rollout.tensor_model_parallel_size", True),))
SP4 = Requirements(parallel=(ParallelSize("critic", 4, "critic.ulysses_sequence_parallel_size"),))
FSDP4 = Requirements(parallel=(ParallelSize("actor", 4, "actor_rollout_ref.actor.fsdp_config.fsdp_size"),))
OWN_RM = Requirements(reward_own_pool=True)

BAD = [
    # (placement, cluster, requirements, fragment of the message)
    ("", C18, PPO, "is empty"),
    ("actor:0-3;critic:4-5;critic:6-7", C18, PPO, "role 'critic' is in two groups"),
    ("halfs", C18, PPO, "Did you mean 'halves'"),
    ("everything", C18, PPO, "unknown placement 'everything'"),
    ("0:8", C18, PPO, "gives the actor's pool 0 GPUs"),
    ("8:0", C18, PPO, "gives the critic's pool 0 GPUs"),
    ("6:4", C18, PPO, "asks for 10 GPUs per node but a node has 8"),
    ("6:x", C18, PPO, "unknown role '6'"),
    ("actor:0-3;;critic:4-7", C18, PPO, "is empty (two ';' in a row"),
    ("actor:0-3;", C18, PPO, "a ';' at an end"),
    ("actor:0-3;critic", C18, PPO, "has no ':' between its roles and its GPUs"),
    (":0-3;critic:4-7", C18, PPO, "names no role"),
    ("actor:;critic:4-7", C18, PPO, "names no GPU"),
    ("actor,critc:0-3", C18, PPO, "unknown role 'critc'"),
    ("actor,,rollout:0-3;critic:4-7", C18, PPO, "empty role name"),
    ("actor,actor:0-3;critic:4-7", C18, PPO, "listed twice in group"),
    ("actor:0-3;critic,actor:4-7", C18, PPO, "role 'actor' is in two groups"),
    ("actor:a-b;critic:4-7", C18, PPO, "'a-b' in group 'actor:a-b' is not a GPU index or range"),
    ("actor:-1;critic:4-7", C18, PPO, "'-1' in group"),
    ("actor:5-3;critic:6-7", C18, PPO, "is reversed"),
    ("actor:0,,1;critic:4-7", C18, PPO, "empty GPU entry"),
    ("actor:0-15;critic:4-7", C18, PPO, "GPU 15 in group 'actor:0-15' is outside the cluster"),
    ("actor:0-99999999999999;critic:4-7", C18, PPO, "is outside the cluster"),
    ("actor:0,1,1;critic:4-7", C18, PPO, "GPU 1 is listed twice in group"),
    ("actor:0-4;critic:4-7", C18, PPO, "GPU 4 is in two groups"),
    ("actor:all;critic:all", C18, PPO, "GPU 0 is in two groups"),
    ("actor,ref:0-3;rollout,critic:4-7", C18, PPO, "actor and rollout are one worker"),
    ("actor,rollout:0-3;ref:4-5;critic:6-7", C18, PPO, "'ref' is in group 'ref:4-5', which holds no critic"),
    ("actor,rollout:0-3;ref,critic:4-7", C18, NO_REF, "this run has no reference model"),
    ("actor,rollout:0-3;ref,critic:4-7", C18, REF_BOUND, "apart from the actor's 'actor,rollout:0-3', but verl's v1"),
    ("critic:0-3", C18, PPO, "no group holds the actor"),
    ("actor,rollout,ref:0-7", C18, PPO, "needs a critic (algorithm.adv_estimator=gae) but no group holds it"),
    ("actor:0-3;critic:4-7", C18, PPO_RM, "reward model is enabled"),
    ("actor:0-3;critic:4-7", C18, GRPO, "holds only roles this run does not use"),
    ("actor:0-3;critic:4-5;reward:6-7", C18, PPO_RM, "holds the reward model alone"),
    ("actor:0-3;critic,reward:4-7", C18, OWN_RM, "has its own reward_pool"),
    ("6:2", C18, GRPO, "splits off a critic pool, but this run has no critic"),
    ("per-group", C18, PPO, "the cluster has 1 node"),
    ("per-node", Cluster(2, 1), PPO, "a node has only 1 GPU"),
    ("halves", Cluster(1, 1), PPO, "a node has only 1 GPU"),
    ("actor:0-2;critic:3-7", C18, TP2, "has 3 GPUs, which is not divisible by"),
    ("actor:0-5,8-9;critic:6-7,10-15", C28, TP4, "would straddle nodes"),
    ("3:5", C18, SP4, "critic.ulysses_sequence_parallel_size=4"),
    ("6:2", C18, FSDP4, "actor_rollout_ref.actor.fsdp_config.fsdp_size=4"),
]


@pytest.mark.parametrize(("placement", "cluster", "req", "fragment"), BAD, ids=[f"{i:02d}" for i in range(len(BAD))])
def test_bad_placements_are_rejected_with_their_own_message(placement, cluster, req, fragment):
    with pytest.raises(PlacementError) as info:
        plan_placement(placement, cluster, req)
    assert fragment in str(info.value)


def test_the_battery_messages_are_distinct():
    messages = set()
    for placement, cluster, req, _ in BAD:
        with pytest.raises(PlacementError) as info:
            plan_placement(placement, cluster, req)
        messages.add(str(info.value))
    assert len(messages) == len(BAD)


@pytest.mark.parametrize(
    ("nnodes", "per_node", "fragment"),
    [(0, 8, "nnodes must be a whole number of at least 1"), (1, 0, "n_gpus_per_node must be"), (True, 8, "nnodes")],
)
def test_bad_cluster_shapes(nnodes, per_node, fragment):
    with pytest.raises(PlacementError, match=fragment):
        Cluster(nnodes, per_node)


BAD_CONFIG = [
    ({"split_placement": "6:2"}, "split_placement must be a mapping"),
    ({"split_placement": {"placment": "6:2"}}, "unknown key(s) placment"),
    ({"split_placement": {"placement": "6:2", "groups": []}}, "sets both 'placement' and 'groups'"),
    ({"split_placement": {"groups": "actor:0-3"}}, "groups must be a list"),
    ({"split_placement": {"groups": []}}, "the list of groups is empty"),
    ({"split_placement": {"groups": ["actor:0-3"]}}, "not a mapping"),
    ({"split_placement": {"groups": [{"roles": ["actor"]}]}}, "has no 'gpus'"),
    ({"split_placement": {"groups": [{"roles": ["actor"], "gpus": "0-3", "node": 1}]}}, "unknown key(s) node"),
    ({"split_placement": {"groups": [{"roles": [1], "gpus": "0-3"}]}}, "roles must be a list of role names"),
    ({"split_placement": {"groups": [{"roles": ["actor"], "gpus": {"a": 1}}]}}, "gpus must be 'all'"),
    ({"split_placement": {"placement": 5}}, "must be a string or a list of groups"),
]


@pytest.mark.parametrize(("config", "fragment"), BAD_CONFIG)
def test_bad_config_blocks(config, fragment):
    with pytest.raises(PlacementError) as info:
        placement_from_config(OmegaConf.create(config) if not isinstance(config["split_placement"], str) else config)
    assert fragment in str(info.value)


# --------------------------------------------------------------------------- property: plan or PlacementError

ROLE_WORDS = st.sampled_from([*ROLES, "actr", "", " critic ", "ACTOR", "teacher"])
GPU_TOKEN = st.one_of(
    st.integers(0, 40).map(str),
    st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda t: f"{t[0]}-{t[1]}"),
    st.sampled_from(["all", "", "-", "x", "3-", "-2", " 1 ", "1--2", "99999999999999999"]),
)
GROUP = st.builds(
    lambda roles, gpus, sep: ",".join(roles) + sep + ",".join(gpus),
    st.lists(ROLE_WORDS, min_size=0, max_size=4),
    st.lists(GPU_TOKEN, min_size=0, max_size=4),
    st.sampled_from([":", ":", ":", "", "::", "="]),
)
PLACEMENT_TEXT = st.one_of(
    st.sampled_from(["halves", "per-node", "per-group", "all", "HALVES", "half"]),
    st.tuples(st.integers(0, 12), st.integers(0, 12)).map(lambda t: f"{t[0]}:{t[1]}"),
    st.lists(GROUP, min_size=1, max_size=3).map(";".join),
    st.text(max_size=30),
)
REQUIREMENTS = st.builds(
    Requirements,
    critic=st.booleans(),
    reward=st.booleans(),
    parallel=st.lists(
        st.builds(
            ParallelSize,
            role=st.sampled_from(ROLES),
            size=st.integers(1, 4),
            key=st.just("some.parallel_size"),
            within_node=st.booleans(),
        ),
        max_size=2,
    ).map(tuple),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=PLACEMENT_TEXT,
    nnodes=st.integers(1, 4),
    per_node=st.integers(1, 8),
    req=REQUIREMENTS,
)
def test_any_placement_plans_validly_or_raises_placement_error(text, nnodes, per_node, req):
    cluster = Cluster(nnodes, per_node)
    try:
        plan = plan_placement(text, cluster, req)
    except PlacementError:
        return
    # Every GPU in at most one pool (roles sharing GPUs share a pool), and inside the cluster.
    seen: list[int] = [g for pool in plan.pools for g in pool.gpus]
    assert len(seen) == len(set(seen))
    assert all(0 <= g < cluster.n_gpus for g in seen)
    # Every role the run needs is mapped; actor, rollout and ref share a pool.
    for role in req.needed_roles():
        assert role in plan.mapping, (text, role)
    assert plan.mapping["actor"] == plan.mapping["rollout"] == plan.mapping["ref"]
    # The spec is exactly the planned GPUs, per node, no pool empty.
    spec_ = plan.resource_pool_spec
    assert sum(sum(v) for v in spec_.values()) == len(seen)
    for pool in plan.pools:
        assert spec_[pool.name] == [len([g for g in pool.gpus if g // per_node == n]) for n in pool.nodes]
        assert pool.size > 0 and all(c <= per_node for c in spec_[pool.name])
    for need in req.parallel:
        pool = plan.pool_of(need.role)
        if pool is not None:
            assert pool.size % need.size == 0
    render_plan(plan)  # renders every valid plan without raising


@given(st.text(max_size=40))
def test_parse_never_raises_anything_but_placement_error(text):
    with contextlib.suppress(PlacementError):
        parse_placement(text)
