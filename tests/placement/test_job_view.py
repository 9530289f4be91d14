"""The job's view of verl's config (``placement.job``): read once, the same from OmegaConf and from plain dicts, and
per verl family where verl's keys moved; the readers give the same answers from the view as from the config."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.paths import ROOT

from verl_split.core.errors import PlacementError
from verl_split.placement import (
    Job,
    job_from_config,
    plan_from_config,
    requirements_from_config,
    shared_rollout_from_config,
)
from verl_split.placement.job_config import as_job, installed_family
from verl_split.placement.model import ACTOR_MINI, CRITIC_MINI
from verl_split.tools.hydra_config import compose_config

pytestmark = pytest.mark.unit

#: A small decoder's config.json (the shapes the view reads).
MODEL = {
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
PACKAGE = ROOT / "verl_split"


@pytest.fixture(scope="module")
def model_dir(model_folder):
    return model_folder("model", MODEL)


def _without_followers(job: Job) -> Job:
    return dataclasses.replace(job, batch=dataclasses.replace(job.batch, followers=()))


#: The installed verl's family: where its config keeps Megatron and the critic's FSDP block.
FAMILY = installed_family() or "0.9"
LEGACY = FAMILY == "0.7"
CRITIC_FSDP = "critic.model.fsdp_config" if LEGACY else "critic.fsdp"


def compose(*overrides: str, megatron: bool = False, model: Path | None = None) -> object:
    """The installed verl's ``ppo_trainer`` (0.7: ``ppo_megatron_trainer`` for Megatron) with ``overrides``."""
    name = "ppo_megatron_trainer" if megatron and LEGACY else "ppo_trainer"
    engine = ["model_engine=megatron"] if megatron and not LEGACY else []
    models = [f"actor_rollout_ref.model.path={model}", f"critic.model.path={model}"] if model else []
    return compose_config(name, None, [*engine, *overrides, *models])


@pytest.mark.parametrize(
    ("overrides", "megatron"),
    [
        (["trainer.n_gpus_per_node=8"], False),
        (
            [
                "trainer.n_gpus_per_node=8",
                "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                "algorithm.use_kl_in_reward=true",
            ],
            True,
        ),
        (
            [
                "trainer.nnodes=2",
                "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
                f"{CRITIC_FSDP}.param_offload=true",
                "+split_placement.placement=6:2",
                "+split_placement.shared_rollout=true",
            ],
            False,
        ),
    ],
    ids=["fsdp", "megatron", "split-block"],
)
def test_a_dict_and_verls_composed_config_give_the_same_view(overrides, megatron, model_dir):
    composed = compose(*overrides, megatron=megatron, model=model_dir)
    from_omegaconf = job_from_config(composed)
    from_dict = job_from_config(OmegaConf.to_container(composed, resolve=True))
    # Which key follows which is an interpolation: only OmegaConf still has it.
    assert from_omegaconf.batch.followers == ((CRITIC_MINI, ACTOR_MINI),)
    assert from_dict.batch.followers == ()
    assert _without_followers(from_omegaconf) == from_dict
    assert from_dict.actor.model.shape.layers == 24 and from_dict.rollout.name is None  # "???" in a plain dict


def test_verls_composed_config_reads_into_the_fields(model_dir):
    overrides = [
        "trainer.n_gpus_per_node=8",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
        "algorithm.use_kl_in_reward=true",
    ]
    job = job_from_config(compose(*overrides, megatron=True, model=model_dir))
    assert (job.trainer.nnodes, job.trainer.n_gpus_per_node) == (1, 8)
    assert job.rules == ("legacy" if LEGACY else "v1")
    assert job.actor.strategy == job.critic.strategy == "megatron"
    assert job.actor.mesh is not None and job.actor.mesh.tp == 2 and job.actor.megatron_size == 2
    assert job.ref.mesh is not None and job.ref.mesh.tp == 2  # the reference's mesh follows the actor's
    assert job.critic.mesh is not None and job.critic.mesh.tp == 1
    assert job.rollout.replica == 4 and job.rollout.gpu_memory_utilization == 0.5
    assert job.uses_reference and job.needs_critic and job.running_roles == ("actor", "ref", "critic")
    # The critic's model counts a value head where the actor's counts its LM head.
    actor, critic = job.actor.model.shape.params, job.critic.model.shape.params
    assert actor is not None and critic is not None
    assert actor - critic == pytest.approx(MODEL["vocab_size"] * MODEL["hidden_size"] - MODEL["hidden_size"])


def test_the_installed_verls_critic_fsdp_block_is_the_one_read():
    job = job_from_config(compose(f"{CRITIC_FSDP}.fsdp_size=2"))
    assert (job.critic.fsdp.key, job.critic.fsdp.present, job.critic.fsdp.size) == (CRITIC_FSDP, True, 2)


@pytest.mark.parametrize(
    "config",
    [
        {"trainer": {"nnodes": 1, "n_gpus_per_node": 8}, "data": {"train_batch_size": 64}},
        {
            "trainer": {"nnodes": 1, "n_gpus_per_node": 8},
            "data": {"train_batch_size": 48},
            "algorithm": {"use_kl_in_reward": True},
            "actor_rollout_ref": {"actor": {"ulysses_sequence_parallel_size": 2, "ppo_mini_batch_size": 16}},
            "critic": {"fsdp": {"fsdp_size": 2}},
            "split_placement": {"placement": "4:4"},
        },
    ],
)
def test_the_readers_answer_the_same_from_the_config_and_its_view(config):
    job = job_from_config(config)
    assert as_job(job) is job
    assert requirements_from_config(job) == requirements_from_config(config)
    assert plan_from_config(job, "") == plan_from_config(config, "")


def test_a_view_read_for_one_family_is_not_taken_for_another():
    job = job_from_config({}, "0.7")
    assert as_job(job, "0.7") is job
    with pytest.raises(ValueError, match="0.7"):
        requirements_from_config(job, family="0.9")


def test_an_unknown_family_reads_by_the_nearest_known_rules():
    job = job_from_config({}, "0.6")
    assert (job.family, job.asked_family, job.rules) == ("0.7", "0.6", "legacy")
    # verl's main (0.10.0.dev) reads by the newest rules: as strings, "0.10" sorts below "0.9".
    job = job_from_config({}, "0.10")
    assert (job.family, job.asked_family, job.rules) == ("0.9", "0.10", "v1")


# --------------------------------------------------------------------------- where verl's keys moved per family

ROLE_ULYSSES = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
BLOCK_ULYSSES = "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"


@pytest.mark.parametrize(
    ("family", "trainer", "rules", "critic_key"),
    [
        ("0.7", {}, "legacy", "critic.ulysses_sequence_parallel_size"),  # 0.7's legacy CriticWorker: its own key
        ("0.7", {"use_legacy_worker_impl": "disable"}, "v0", "critic.fsdp.ulysses_sequence_parallel_size"),
        ("0.8", {}, "v0", "critic.fsdp.ulysses_sequence_parallel_size"),
        ("0.9", {}, "v1", "critic.fsdp.ulysses_sequence_parallel_size"),
        ("0.9", {"use_v1": False}, "v0", "critic.fsdp.ulysses_sequence_parallel_size"),
    ],
)
def test_each_family_reads_the_ulysses_size_where_its_workers_do(family, trainer, rules, critic_key):
    config = {"trainer": trainer, "critic": {"ulysses_sequence_parallel_size": 2}}
    job = job_from_config(config, family)
    assert job.rules == rules
    assert [key for key, _ in job.critic.ulysses] == [critic_key]
    assert [key for key, _ in job.actor.ulysses] == (
        [ROLE_ULYSSES] if rules == "legacy" else [ROLE_ULYSSES, BLOCK_ULYSSES]
    )
    # The engine critic never reads its role-level key: there it trains without sequence parallelism.
    assert job.critic.ulysses_role_key == 2
    assert job.critic.ulysses_size == (2 if rules == "legacy" else 1)


@pytest.mark.parametrize(
    ("critic", "block"),
    [
        ({"model": {"fsdp_config": {"fsdp_size": 2, "param_offload": True}}}, "critic.model.fsdp_config"),  # 0.7
        ({"fsdp": {"fsdp_size": 2, "param_offload": True}}, "critic.fsdp"),  # 0.8, 0.9
    ],
)
def test_the_critics_fsdp_block_is_read_where_the_config_has_it(critic, block):
    job = job_from_config({"critic": critic})
    chosen = job.critic.fsdp
    assert (chosen.key, chosen.present, chosen.size, chosen.param_offload) == (block, True, 2, True)
    # The planner checks every block's fsdp_size key; the one absent reads as unset.
    assert {b.key: b.size for b in job.critic.fsdp_blocks} == {
        "critic.fsdp": 2 if block == "critic.fsdp" else None,
        "critic.model.fsdp_config": 2 if block != "critic.fsdp" else None,
    }
    loaded = job.with_offload("critic", param=False, optimizer=False).critic
    assert loaded.fsdp.key == block and not loaded.fsdp.param_offload
    assert job.critic.fsdp.param_offload  # a view is never changed in place


def test_hf_config_path_gives_the_shape_over_the_model_path(model_dir, tmp_path):
    config = {"actor_rollout_ref": {"model": {"path": str(tmp_path / "nowhere"), "hf_config_path": str(model_dir)}}}
    job = job_from_config(config)
    assert job.actor.model.path == str(tmp_path / "nowhere") and job.actor.model.shape.layers == 24


# --------------------------------------------------------------------------- read once, in one place


def test_the_split_placement_block_is_read_without_the_rest_of_the_job(monkeypatch):
    monkeypatch.delenv("VERL_SPLIT_TEST_UNSET", raising=False)
    config = OmegaConf.create(
        {"trainer": {"nnodes": "${oc.env:VERL_SPLIT_TEST_UNSET}"}, "split_placement": {"shared_rollout": True}}
    )
    assert shared_rollout_from_config(config) is True  # the runtime's switch reads the block alone
    with pytest.raises(PlacementError, match="could not read trainer.nnodes"):
        job_from_config(config)


#: The modules that read verl's keys: the view's builder and its Megatron block (the readers of a type are
#: ``config_keys``' own, around ``select_key``).
KEY_READERS = {"placement/job_config.py", "placement/megatron_config.py", "placement/config_keys.py"}
READER_NAMES = {
    "select_key",
    "count_key",
    "flag_key",
    "number_key",
    "text_key",
    "choice_key",
    "steps_key",
    "present_key",
}


def test_verls_keys_are_read_in_one_place():
    readers = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if not any(name in text for name in READER_NAMES):
            continue
        calls = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)]
        if any(getattr(call.func, "id", getattr(call.func, "attr", None)) in READER_NAMES for call in calls):
            readers.add(path.relative_to(PACKAGE).as_posix())
    assert readers == KEY_READERS


#: verl's sections a hand reading would name (``trainer.config.data...``, ``config.get("global_profiler")``).
SECTIONS = "actor_rollout_ref|critic|data|trainer|algorithm|reward|global_profiler|transfer_queue|split_placement"
#: The one block the runtime touches by hand: the rollout's checkpoint engine, which shared rollout rewrites for
#: verl's workers (its backend) and hands to verl's own manager; no fact of the job is read there (its backend,
#: before the rewrite, is the job's ``rollout.checkpoint_backend``).
REWRITTEN = ".actor_rollout_ref.rollout.checkpoint_engine"


def test_no_module_reads_verls_config_by_hand():
    hand = re.compile(rf"(^|\.)config\.({SECTIONS})\b")
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # read whole chains only
        for node in ast.walk(tree):
            if id(node) in inner:
                continue
            text = ast.unparse(node) if isinstance(node, ast.Attribute | ast.Call) else ""
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                base = ast.unparse(node.func.value)
                if re.search(r"(^|\.)config$", base) and path.name != "hf_config.py":  # a model's config.json
                    found.append(f"{path.relative_to(PACKAGE)}: {text}")
            elif (
                isinstance(node, ast.Attribute)
                and hand.search(text)
                and not text.split("config", 1)[1].startswith(REWRITTEN)
            ):
                found.append(f"{path.relative_to(PACKAGE)}: {text}")
    assert found == []
