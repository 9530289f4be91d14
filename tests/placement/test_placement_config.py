"""Reading verl's config: select_key, the placement block, and each family's parallel-size keys."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_split.core.errors import PlacementError
from verl_split.placement import (
    DEFAULT_READY_TIMEOUT_S,
    Cluster,
    parse_placement,
    plan_from_config,
    plan_placement,
    ready_timeout_from_config,
    requirements_from_config,
    select_key,
)

pytestmark = pytest.mark.unit


def test_select_key_names_an_interpolation_it_cannot_resolve(monkeypatch):
    monkeypatch.delenv("NNODES", raising=False)
    config = OmegaConf.create({"trainer": {"nnodes": "${oc.env:NNODES}", "n_gpus_per_node": 8}})
    with pytest.raises(PlacementError) as exc:
        select_key(config, "trainer.nnodes")
    message = str(exc.value)
    assert "trainer.nnodes" in message and "NNODES" in message, message
    with pytest.raises(PlacementError, match="NNODES"):
        plan_from_config(config, "")


@pytest.mark.parametrize(
    ("value", "cause"),
    [("${trainer.nope}", "InterpolationKeyError"), ("${no_such_resolver:1}", "UnsupportedInterpolationType")],
)
def test_select_key_names_any_interpolation_it_cannot_resolve(value, cause):
    config = OmegaConf.create({"trainer": {"nnodes": value}})
    with pytest.raises(PlacementError, match=f"could not read trainer.nnodes from verl's config: {cause}"):
        select_key(config, "trainer.nnodes")


def test_select_key_resolves_interpolations_that_work(monkeypatch):
    monkeypatch.setenv("NNODES", "2")
    config = OmegaConf.create({"trainer": {"nnodes": "${oc.decode:${oc.env:NNODES}}", "n_gpus_per_node": 8}})
    assert select_key(config, "trainer.nnodes") == 2


@pytest.mark.parametrize(
    "config",
    [
        OmegaConf.create({"a": {"b": 1}}),
        OmegaConf.create({"a": {"b": 1, "c": "???"}}),  # a mandatory value left unset reads as missing
        OmegaConf.create({"a": {"b": 1, "c": None}}),
        OmegaConf.create({"a": 3}),
        OmegaConf.create({"a": [1, 2]}),
        {"a": {"b": 1}},
        {"a": {"b": 1, "c": None}},
        {"a": 3},  # a leaf where a mapping was expected
    ],
    ids=[
        "dictconfig",
        "mandatory",
        "dictconfig-none",
        "dictconfig-leaf",
        "dictconfig-list",
        "dict",
        "dict-none",
        "dict-leaf",
    ],
)
def test_select_key_gives_the_default_for_a_missing_key(config):
    assert select_key(config, "a.c", "default") == "default"
    assert select_key(config, "a.c.d", 7) == 7
    assert select_key(config, "nowhere") is None


def test_select_key_reads_struct_configs_without_raising():
    config = OmegaConf.create({"a": {"b": 1}})
    OmegaConf.set_struct(config, True)
    assert select_key(config, "a.b") == 1
    assert select_key(config, "a.missing", 5) == 5


def test_placement_block_interpolations_are_resolved():
    config = OmegaConf.create(
        {
            "trainer": {"nnodes": 1, "n_gpus_per_node": 8},
            "sizes": {"actor": "0-5"},
            "split_placement": {
                "groups": [{"roles": ["actor"], "gpus": "${sizes.actor}"}, {"roles": ["critic"], "gpus": [6, 7]}]
            },
        }
    )
    assert plan_from_config(config, "").resource_pool_spec == {"actor_rollout_ref_pool": [6], "critic_pool": [2]}


@pytest.mark.parametrize(("typo", "meant"), [("per-grop", "per-group"), ("pergroup", "per-group"), ("halfs", "halves")])
def test_did_you_mean_proposes_the_closest_shorthand(typo, meant):
    with pytest.raises(PlacementError, match=f"Did you mean '{meant}'"):
        parse_placement(typo)


def test_no_suggestion_for_a_word_like_no_shorthand():
    with pytest.raises(PlacementError) as exc:
        parse_placement("zzzz")
    assert "Did you mean" not in str(exc.value)


def test_ready_timeout_default_and_override():
    base = {"trainer": {"nnodes": 1, "n_gpus_per_node": 2}}
    assert plan_from_config(base, "").ready_timeout_s == DEFAULT_READY_TIMEOUT_S
    config = {**base, "split_placement": {"ready_timeout_s": 30}}
    assert plan_from_config(config, "").ready_timeout_s == 30.0
    for bad in (0, -1):
        with pytest.raises(PlacementError, match="ready_timeout_s must be a number of seconds above 0"):
            ready_timeout_from_config({"split_placement": {"ready_timeout_s": bad}})
    for bad in ("soon", True):
        with pytest.raises(PlacementError, match="ready_timeout_s is .*, where a number is needed"):
            ready_timeout_from_config({"split_placement": {"ready_timeout_s": bad}})


# --------------------------------------------------------------------------- the installed verl's own config

#: The critic's FSDP block per family: verl 0.7's legacy CriticWorker reads critic.model.fsdp_config
#: (verl/workers/fsdp_workers.py); 0.8 and 0.9 name it critic.fsdp.
CRITIC_FSDP_KEYS = ("critic.fsdp.fsdp_size", "critic.model.fsdp_config.fsdp_size")


@pytest.fixture(scope="module")
def verl_ppo_config():
    from verl_split.tools.plan import compose_config

    return compose_config("ppo_trainer", None, ["trainer.n_gpus_per_node=8"])


def test_the_installed_verls_critic_fsdp_size_is_checked(verl_ppo_config):
    present = [key for key in CRITIC_FSDP_KEYS if select_key(verl_ppo_config, key) is not None]
    assert present, f"the installed verl's ppo_trainer config has none of {CRITIC_FSDP_KEYS}"
    for key in present:
        config = verl_ppo_config.copy()
        OmegaConf.update(config, key, 3)
        req = requirements_from_config(config)
        assert any(p.key == key and p.size == 3 for p in req.parallel), req.parallel
        # halves on 8 GPUs gives the critic 4: not a multiple of fsdp_size 3.
        with pytest.raises(PlacementError, match=key.replace(".", r"\.") + "=3"):
            plan_placement("halves", Cluster(1, 8), req)


def test_the_installed_verls_default_critic_adds_no_parallel_size(verl_ppo_config):
    # fsdp_size -1 and ulysses 1: nothing to check, and the default plan stands.
    assert [p for p in requirements_from_config(verl_ppo_config).parallel if p.role == "critic"] == []
    assert plan_from_config(verl_ppo_config, "").resource_pool_spec == {
        "actor_rollout_ref_pool": [4],
        "critic_pool": [4],
    }


def _critic_sp_config(**keys: int) -> dict:
    config: dict = {"trainer": {"nnodes": 1, "n_gpus_per_node": 4}, "algorithm": {"adv_estimator": "gae"}}
    critic = config.setdefault("critic", {"fsdp": {}})
    for key, value in keys.items():
        if key == "fsdp":
            critic["fsdp"]["ulysses_sequence_parallel_size"] = value
        else:
            critic["ulysses_sequence_parallel_size"] = value
    return config


@pytest.mark.parametrize(
    ("family", "keys", "size", "noted"),
    [
        ("0.9", {"fsdp": 2}, 2, False),  # the engine critic reads its engine block
        ("0.9", {"role": 2}, 1, True),  # ... and never the deprecated role-level key: SP silently off
        ("0.8", {"role": 2, "fsdp": 2}, 2, False),
        ("0.7", {"role": 2}, 2, False),  # 0.7's legacy CriticWorker reads the role-level key
    ],
)
def test_the_critics_ulysses_size_is_read_where_the_critic_reads_it(family, keys, size, noted):
    from verl_split.placement.batch_config import ignored_ulysses_note

    config = _critic_sp_config(**keys)
    critic_sizes = [p.size for p in requirements_from_config(config, family).parallel if p.role == "critic"]
    assert max(critic_sizes, default=1) == size
    note = ignored_ulysses_note(config, family)
    assert bool(note) == noted
    if noted:
        assert "critic.fsdp.ulysses_sequence_parallel_size=2" in note and "without sequence parallelism" in note
