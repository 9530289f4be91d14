"""Shared rollout (rollout replicas on the critic pool too): the switch, the checks before Ray, the picture.

Unit tests with dict configs: no process, no Ray, no verl trainer. The installed verl's version is
set per test (``compat.installed_version``), so the suite gives the same answers on every family.
"""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf
from support.nested import set_dotted

from verl_split.core import compat, settings
from verl_split.core.errors import ActivationFailed, PlacementError, SettingsError
from verl_split.placement import (
    ACTOR_POOL,
    CRITIC_POOL,
    GLOBAL_POOL,
    Cluster,
    Requirements,
    plan_from_config,
    plan_placement,
    render_plan,
    shared_rollout_from_config,
)

pytestmark = pytest.mark.unit

SWITCH_OFF = "switch shared rollout off"


@pytest.fixture(autouse=True)
def _verl_09_and_a_clean_environment(monkeypatch):
    # The release check reads the installed verl; 0.9.1 here unless a test says otherwise.
    monkeypatch.setattr(compat, "installed_version", lambda distribution="verl": "0.9.1")
    # Nothing frozen, no VERL_SPLIT* from the developer's shell: settings.current() reads an empty environment.
    for name in settings.VARIABLES:
        monkeypatch.delenv(name, raising=False)


def config(nnodes: int = 1, per_node: int = 8, tp: int = 1, shared: Any = True, **extra: Any) -> dict[str, Any]:
    """A verl-like config as nested dicts; ``extra`` keys are dotted paths (``trainer.use_v1=False``)."""
    result: dict[str, Any] = {
        "trainer": {"nnodes": nnodes, "n_gpus_per_node": per_node},
        "actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": tp}},
    }
    if shared is not None:
        result["split_placement"] = {"shared_rollout": shared}
    for dotted, value in extra.items():
        set_dotted(result, dotted, value)
    return result


def with_placement(base: dict[str, Any], placement: str) -> dict[str, Any]:
    base.setdefault("split_placement", {})["placement"] = placement
    return base


def plan_error(cfg: dict[str, Any]) -> str:
    with pytest.raises(PlacementError) as exc:
        plan_from_config(cfg, "")
    return str(exc.value)


# --------------------------------------------------------------------------- the switch


@pytest.mark.parametrize(("value", "on"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)])
def test_the_variable_is_an_on_off_switch(value, on):
    assert settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_SHARED_ROLLOUT": value}).shared_rollout is on


def test_the_variable_is_off_by_default_and_strict():
    assert settings.read({"VERL_SPLIT": "1"}).shared_rollout is False
    assert settings.VARIABLES["VERL_SPLIT_SHARED_ROLLOUT"][0] == "off"
    with pytest.raises(SettingsError, match="VERL_SPLIT_SHARED_ROLLOUT='sure' is not an accepted value"):
        settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_SHARED_ROLLOUT": "sure"})


def test_the_variable_is_not_read_while_verl_split_is_off():
    assert settings.read({"VERL_SPLIT_SHARED_ROLLOUT": "sure"}) == settings.Settings()
    assert settings.read({"VERL_SPLIT_SHARED_ROLLOUT": "1"}).shared_rollout is False


def test_the_config_key_wins_over_the_environment():
    assert shared_rollout_from_config(config(shared=True), False) is True
    assert shared_rollout_from_config(config(shared=False), True) is False
    assert shared_rollout_from_config(config(shared=None), True) is True
    assert shared_rollout_from_config(config(shared=None), False) is False
    assert plan_from_config(config(shared=False), "", shared_rollout=True).shared_rollout is False
    assert plan_from_config(config(shared=None), "", shared_rollout=True).shared_rollout is True


def test_without_a_value_the_frozen_settings_decide(monkeypatch):
    assert shared_rollout_from_config(config(shared=None)) is False
    settings.freeze(settings.Settings(enabled=True, shared_rollout=True))
    assert shared_rollout_from_config(config(shared=None)) is True
    assert plan_from_config(config(shared=None), "").shared_rollout is True


@pytest.mark.parametrize(("value", "on"), [("yes", True), ("off", False), (1, True), (0, False)])
def test_the_config_key_takes_the_switchs_spellings(value, on):
    # hydra reads +split_placement.shared_rollout=1 as an int, =yes as a string.
    assert shared_rollout_from_config(config(shared=value), not on) is on


@pytest.mark.parametrize("value", ["maybe", 2, [True], 1.0])
def test_a_config_value_that_is_not_on_or_off_is_an_error(value):
    with pytest.raises(
        PlacementError, match=r"split_placement\.shared_rollout is .*, where true or false is needed"
    ) as exc:
        shared_rollout_from_config(config(shared=value))
    assert "+split_placement.shared_rollout=true" in str(exc.value)


def test_the_key_is_read_from_omegaconf_too():
    cfg = OmegaConf.create(config(shared=True))
    assert plan_from_config(cfg, "").shared_rollout is True


# --------------------------------------------------------------------------- plans that hold


def test_halves_on_one_node_of_two():
    plan = plan_from_config(config(per_node=2), "")
    assert plan.resource_pool_spec == {ACTOR_POOL: [1], CRITIC_POOL: [1]}
    assert [pool.name for pool in plan.rollout_pools] == [ACTOR_POOL, CRITIC_POOL]


def test_halves_on_one_node_of_eight_with_tp_2():
    plan = plan_from_config(config(tp=2), "")
    assert plan.resource_pool_spec == {ACTOR_POOL: [4], CRITIC_POOL: [4]}
    assert [pool.gpus for pool in plan.rollout_pools] == [(0, 1, 2, 3), (4, 5, 6, 7)]


@pytest.mark.parametrize(
    ("placement", "spec"),
    [
        ("halves", {ACTOR_POOL: [8], CRITIC_POOL: [8]}),  # one node each
        ("6:2", {ACTOR_POOL: [6, 6], CRITIC_POOL: [2, 2]}),
        ("actor,rollout,ref:0-1,8-9;critic:2-7,10-15", {ACTOR_POOL: [2, 2], CRITIC_POOL: [6, 6]}),
    ],
)
def test_two_nodes(placement, spec):
    plan = plan_from_config(with_placement(config(nnodes=2, tp=2), placement), "")
    assert plan.resource_pool_spec == spec
    assert plan.shared_rollout and len(plan.rollout_pools) == 2


def test_a_reward_model_beside_the_critic_fits():
    # critic + reward model + the shared rollout: 3 worker groups, verl's limit per GPU.
    plan = plan_from_config(config(**{"reward.reward_model.enable": True}), "")
    assert plan.pool(CRITIC_POOL).roles == ("critic", "reward") and len(plan.rollout_pools) == 2


def test_merged_lora_is_fine():
    model = "actor_rollout_ref.model"
    cfg = config(**{f"{model}.lora_rank": 8, f"{model}.lora.merge": True})
    assert plan_from_config(cfg, "").shared_rollout


def test_off_checks_nothing_and_generates_on_the_actors_pool_only():
    cfg = config(shared=False, **{"trainer.use_v1": False, "actor_rollout_ref.model.lora_rank": 8})
    plan = plan_from_config(with_placement(cfg, "all"), "")
    assert not plan.shared_rollout and [pool.name for pool in plan.rollout_pools] == [GLOBAL_POOL]
    assert plan.to_json()["shared_rollout"] is False
    assert plan_from_config(config(), "").to_json()["shared_rollout"] is True


# --------------------------------------------------------------------------- a. a critic pool of its own


def test_placement_all_has_no_second_pool():
    message = plan_error(with_placement(config(), "all"))
    assert "places the critic on the actor's GPUs (global_pool)" in message
    assert "split_placement.placement='all'" in message and "halves or 6:2" in message and SWITCH_OFF in message


def test_a_run_without_a_critic_has_no_critic_pool():
    message = plan_error(config(**{"algorithm.adv_estimator": "grpo"}))
    assert "this run has none (algorithm.adv_estimator=grpo)" in message
    assert "critic.enable=true" in message and SWITCH_OFF in message


def test_a_reward_model_alone_on_the_critic_side_is_no_critic_pool():
    cfg = config(**{"algorithm.adv_estimator": "grpo", "reward.reward_model.enable": True})
    assert "this run has none (algorithm.adv_estimator=grpo)" in plan_error(cfg)


# --------------------------------------------------------------------------- b. whole replicas per node


def test_the_critic_side_must_hold_whole_replicas():
    message = plan_error(with_placement(config(tp=2), "4:3"))
    assert "the critic pool has 3 GPUs on node 0, not a whole number of rollout replicas of 2 GPUs" in message
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size x data x pipeline=2" in message
    assert "a multiple of 2 GPUs per node, e.g. 4:4" in message and SWITCH_OFF in message


def test_the_critic_pool_is_checked_node_by_node():
    # A pool has the same count on every node it uses (the planner refuses others before this check).
    cfg = with_placement(config(nnodes=2, tp=2), "actor,rollout,ref:0-3,8-11;critic:4-6,12-14")
    assert "the critic pool has 3 GPUs on node 0" in plan_error(cfg)


def test_the_replica_is_tensor_x_data_x_pipeline():
    rollout = "actor_rollout_ref.rollout"
    cfg = config(**{f"{rollout}.data_parallel_size": 2, f"{rollout}.pipeline_model_parallel_size": 2})
    # 4 GPUs a replica: the actor's 4 hold one, the critic's 2 cannot.
    message = plan_error(with_placement(cfg, "4:2"))
    assert "has 2 GPUs on node 0, not a whole number of rollout replicas of 4 GPUs" in message


def test_the_ratio_hint_gives_both_sides_whole_replicas():
    message = plan_error(with_placement(config(per_node=6, tp=2), "actor,rollout,ref:0-3;critic:4"))
    assert "the critic pool has 1 GPU on node 0" in message and "e.g. 4:2" in message


def test_no_ratio_hint_when_no_node_split_fits():
    # A replica of 8 GPUs fills a node of 8: no A:C split leaves the actor a GPU.
    message = plan_error(with_placement(config(nnodes=2, tp=8), "actor,rollout,ref:0-7;critic:12-15"))
    assert "the critic pool has 4 GPUs on node 1" in message and "e.g." not in message


# --------------------------------------------------------------------------- c. worker groups per GPU


def test_more_worker_groups_than_verl_colocates_is_an_error(monkeypatch):
    # Three fit today (critic, reward model, shared rollout); the check guards the next role.
    from verl_split.placement import shared

    monkeypatch.setattr(shared, "MAX_WORKER_GROUPS_PER_GPU", 2)
    message = plan_error(config(**{"reward.reward_model.enable": True}))
    assert "3 worker groups on each GPU of the critic pool (critic, reward, shared rollout)" in message
    assert "reward.reward_model.enable_resource_pool=true" in message and SWITCH_OFF in message


def test_a_reward_model_with_its_own_pool_is_not_counted(monkeypatch):
    from verl_split.placement import shared

    monkeypatch.setattr(shared, "MAX_WORKER_GROUPS_PER_GPU", 2)
    rm = "reward.reward_model"
    assert plan_from_config(config(**{f"{rm}.enable": True, f"{rm}.enable_resource_pool": True}), "").shared_rollout


# ------------------------------------------------------------------- d. the v1 trainer in sync mode, or RayPPOTrainer


def test_ray_ppo_trainer_plans_whatever_its_v1_mode_says():
    """``trainer.use_v1=false``: RayPPOTrainer has no modes, so a v1 mode left in the config is not its."""
    cfg = config(**{"trainer.use_v1": False, "trainer.v1.trainer_mode": "separate_async"})
    assert plan_from_config(cfg, "").shared_rollout


def test_a_trainer_without_hybrid_rollout_is_an_error():
    message = plan_error(config(**{"trainer.use_v1": False, "actor_rollout_ref.hybrid_engine": False}))
    assert "actor_rollout_ref.hybrid_engine=false" in message and SWITCH_OFF in message


@pytest.mark.parametrize("mode", ["separate_async", "colocate_async"])
def test_an_async_trainer_mode_is_an_error(mode):
    message = plan_error(config(**{"trainer.v1.trainer_mode": mode}))
    assert f"trainer.v1.trainer_mode={mode}" in message and "Set trainer.v1.trainer_mode=sync" in message


# --------------------------------------------------------------------------- e. LoRA


@pytest.mark.parametrize("key", ["actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora.rank"])
def test_unmerged_lora_is_an_error(key):
    message = plan_error(config(**{key: 16}))
    assert "LoRA (rank 16) unmerged (actor_rollout_ref.model.lora.merge=false)" in message
    assert "Set actor_rollout_ref.model.lora.merge=true" in message and SWITCH_OFF in message


# --------------------------------------------------------------------------- f. the release


@pytest.mark.parametrize("version", ["0.7.0", "0.7.1"])
def test_an_older_release_is_an_error(monkeypatch, version):
    monkeypatch.setattr(compat, "installed_version", lambda distribution="verl": version)
    message = plan_error(config())
    assert message.startswith(f"shared rollout is not on this release (verl {version})")
    assert "upgrade to verl 0.8 or newer" in message and "VERL_SPLIT_SHARED_ROLLOUT" in message
    # Off, the same release plans as before.
    assert not plan_from_config(config(shared=False), "").shared_rollout


def test_no_verl_here_skips_the_release_check(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda distribution="verl": None)
    assert plan_from_config(config(), "").shared_rollout


# --------------------------------------------------------------------------- before Ray starts


def test_the_launching_process_stops_before_ray(monkeypatch):
    # placement_check runs plan_from_config on main_ppo's config in the launching process.
    from verl_split.runtime.placement.hooks import check_config

    settings.freeze(settings.Settings(enabled=True, shared_rollout=True))
    cfg = with_placement(config(shared=None), "all")
    with pytest.raises(ActivationFailed, match="split placement: shared rollout puts rollout replicas"):
        check_config(cfg)


# --------------------------------------------------------------------------- the picture


def test_the_picture_shows_which_gpus_generate():
    text = render_plan(plan_from_config(with_placement(config(nnodes=2), "6:2"), ""))
    assert "| 6 b:CR   |" in text and "| 4 a:ARF  |" in text
    assert "roles: critic, rollout (shared)" in text
    assert "rollout: GPUs 0-5,8-13 (actor pool, hybrid) and 6-7,14-15 (critic pool, shared rollout)" in text


def test_the_picture_with_a_reward_model():
    text = render_plan(plan_placement("halves", Cluster(1, 8), Requirements(reward=True), shared_rollout=True))
    assert "|4 b:CMR  |" in text and "roles: critic, reward, rollout (shared)" in text
    assert "rollout: GPUs 0-3 (actor pool, hybrid) and 4-7 (critic pool, shared rollout)" in text


def test_the_picture_is_unchanged_when_off():
    # The example READMEs' pictures (test_examples.py) stay as they are: on only adds the rollout.
    on = render_plan(plan_placement("halves", Cluster(1, 8), shared_rollout=True))
    off = render_plan(plan_placement("halves", Cluster(1, 8)))
    assert "rollout:" not in off and "(shared)" not in off
    on_less_the_rollout = "\n".join(line for line in on.splitlines() if not line.startswith("rollout:"))
    assert on_less_the_rollout.replace("b:CR ", "b:C  ").replace(", rollout (shared)", "") == off


# --------------------------------------------------------------------------- the installed verl's own config


@pytest.mark.skipif(
    not compat.verl_in(compat.SHARED_ROLLOUT_V1), reason="the v1 trainer's modes: 0.9's config; 0.8's has no v1 trainer"
)
def test_the_installed_verls_config(monkeypatch):
    from verl_split.tools.hydra_config import compose_config

    base = ["trainer.n_gpus_per_node=8", "+split_placement.shared_rollout=true"]
    plan = plan_from_config(compose_config("ppo_trainer", None, base), "")  # rollout tp 2 by default
    assert [pool.size for pool in plan.rollout_pools] == [4, 4]
    assert plan_from_config(compose_config("ppo_trainer", None, [*base, "trainer.use_v1=false"]), "").shared_rollout
    for override, fragment in (
        ("trainer.v1.trainer_mode=separate_async", "trainer.v1.trainer_mode=separate_async"),
        ("actor_rollout_ref.model.lora_rank=8", "lora.merge=true"),
        ("+split_placement.placement=4:3", "3 GPUs on node 0"),
    ):
        with pytest.raises(PlacementError, match=fragment.replace(".", r"\.")):
            plan_from_config(compose_config("ppo_trainer", None, [*base, override]), "")
