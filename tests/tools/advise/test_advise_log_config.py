"""``verl-split advise`` reads the job from the log and ranks only what the planner accepts (issue 34).

The rollout replica, the cluster, the batch and the Megatron meshes come from verl's printed config, else from the
overrides the log's command echoed; ``--rollout-tp`` wins over both; a log with neither says so. Every ranked
candidate is planned by :func:`verl_split.placement.plan_placement` with the job's own requirements, and every
refused one is refused there, on the real log of ``tests/support/data`` and on verl's Qwen3-8B FSDP and Megatron
recipes.
"""

from __future__ import annotations

import pprint
import string
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.advise_profiles import NEAR_LINEAR, run_file, stock_step
from support.megatron_recipes import PPO_8B, PPO_8B_DEFAULTS, QWEN3_8B, recipe
from support.paths import DATA
from support.verl_console import console_log

from verl_split.core.errors import PlacementError
from verl_split.placement import Cluster, plan_placement, requirements_from_config
from verl_split.tools.advise import advise
from verl_split.tools.advise.log_job import OVERRIDES, overrides_from_text
from verl_split.tools.advise.logs import read_log
from verl_split.tools.advise.runs import AdviseError, read_run
from verl_split.tools.hydra_config import compose_config

pytestmark = pytest.mark.unit

REAL_LOG = DATA / "deepseek7b_megatron_ppo_4gpu.log"

#: verl-project/verl examples/ppo_trainer/run_qwen3_8b_fsdp.sh (commit 4eed706): its DATA, MODEL, ACTOR, ROLLOUT,
#: REF, CRITIC and TRAINER arrays at the script's defaults (ROLLOUT_TP=2, TRAIN_BATCH_SIZE=1024,
#: PPO_MINI_BATCH_SIZE=256), quoted as data; the data files and the logger left out.
QWEN3_8B_FSDP = """
algorithm.adv_estimator=gae
data.train_batch_size=1024
data.max_prompt_length=1024
data.max_response_length=2048
actor_rollout_ref.model.path=$MODEL
actor_rollout_ref.model.use_remove_padding=True
actor_rollout_ref.model.enable_gradient_checkpointing=True
actor_rollout_ref.actor.optim.lr=1e-6
actor_rollout_ref.actor.ppo_mini_batch_size=256
actor_rollout_ref.actor.use_dynamic_bsz=True
actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576
actor_rollout_ref.actor.fsdp_config.param_offload=False
actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.tensor_model_parallel_size=2
actor_rollout_ref.rollout.gpu_memory_utilization=0.6
actor_rollout_ref.rollout.n=1
actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24576
actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True
actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=24576
actor_rollout_ref.ref.fsdp_config.param_offload=True
critic.model.path=$MODEL
critic.model.use_remove_padding=True
critic.model.enable_gradient_checkpointing=True
critic.optim.lr=1e-5
critic.use_dynamic_bsz=True
critic.ppo_max_token_len_per_gpu=24576
critic.fsdp.param_offload=False
critic.fsdp.optimizer_offload=False
trainer.balance_batch=True
trainer.critic_warmup=0
trainer.n_gpus_per_node=8
trainer.nnodes=$NNODES
"""


@pytest.fixture(scope="module")
def qwen3_8b(model_folder):
    return str(model_folder("Qwen3-8B", QWEN3_8B))


def fsdp_recipe(nnodes: int, model: str):
    lines = [string.Template(line).substitute(MODEL=model, NNODES=nnodes) for line in QWEN3_8B_FSDP.split()]
    return compose_config("ppo_trainer", None, lines)


def console_of(path: Path, config, n_gpus: int) -> Path:
    """A stock run's console: the config as verl pprints it at start-up, then its steps."""
    resolved = OmegaConf.to_container(config, resolve=True) if not isinstance(config, dict) else config
    steps = [stock_step(NEAR_LINEAR, n_gpus, 1.0 + 0.01 * (i % 2)) for i in range(4)]
    text = console_log("0.9", steps, None)
    head = "".join(f"(TaskRunner pid=1) {line}\n" for line in pprint.pformat(resolved).splitlines())
    path.write_text(head + text)
    return path


def assert_every_candidate_is_the_planners(advice, config) -> None:
    requirements = requirements_from_config(config)
    for candidate in advice.candidates:
        plan_placement(candidate.placement, advice.cluster, requirements)  # raises if the planner refuses
        for same in candidate.same_prediction_as:
            plan_placement(same, advice.cluster, requirements)
    for name, _ in advice.rejected:
        if name.endswith("+shared"):
            continue
        with pytest.raises(PlacementError):
            plan_placement(name, advice.cluster, requirements)


# --------------------------------------------------------------------------- the real log


def test_real_log_rollout_tp_and_meshes_come_from_its_config():
    advice = advise([REAL_LOG], Cluster(2, 8))
    assert advice.job.rollout_gpus == 4 and "config printed at start-up" in advice.job.rollout_source
    assert {mesh.role for mesh in advice.job.requirements.megatron} == {"actor", "critic"}
    for candidate in advice.candidates:
        p = candidate.prediction
        assert p.actor_gpus % 8 == 0 or p.actor_gpus == 4  # whole TP-4 replicas on each node
    refused = dict(advice.rejected)
    assert {"7:1", "6:2", "5:3", "3:5", "1:7"} <= set(refused)
    assert "would straddle nodes" in refused["6:2"] and "=4 (rollout)" in refused["7:1"]
    assert "does not split over its 3 data-parallel ranks" in refused["2:6"]  # the batch: 256 over 3
    assert_every_candidate_is_the_planners(advice, read_log(REAL_LOG).config)


def test_the_flag_overrides_the_log():
    advice = advise([REAL_LOG], Cluster(2, 8), rollout_tp=2)
    assert advice.job.rollout_gpus == 2 and advice.job.rollout_source == "--rollout-tp"
    assert any("--rollout-tp 2 overrides the rollout replica of 4 GPU(s)" in note for note in advice.job.notes)
    assert "6:2" in dict(advice.rejected)  # still refused: the Megatron TP-4 meshes and the batch
    refused = dict(advise([REAL_LOG], Cluster(2, 8), rollout_tp=1).rejected)
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size" in refused["7:1"]  # the mesh's rule


def test_the_real_log_is_taken_as_run_on_its_own_cluster():
    run = read_run(REAL_LOG, Cluster(2, 8))
    assert run.cluster == Cluster(1, 4) and (run.actor_gpus, run.colocated) == (4, True)


# --------------------------------------------------------------------------- echoed overrides


COMMAND = (
    "+ ROLLOUT_TP=4\n"
    "+ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae data.train_batch_size=1024 \\\n"
    "    actor_rollout_ref.actor.ppo_mini_batch_size=256 "
    "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP \\\n"
    "    'trainer.logger=[console,wandb]' trainer.nnodes=1 trainer.n_gpus_per_node=8 "
    "actor_rollout_ref.model.path=${MODEL_DIR}/Qwen3-8B\n"
)


def test_overrides_echoed_in_the_log_give_the_job(tmp_path):
    steps = [stock_step(NEAR_LINEAR, 8, 1.0 + 0.01 * (i % 2)) for i in range(4)]
    path = tmp_path / "run.log"
    path.write_text(COMMAND + console_log("0.9", steps, None))
    overrides, notes = overrides_from_text(path.read_text())
    assert overrides["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] == 4  # $ROLLOUT_TP resolved
    assert overrides["trainer"] == {"logger": ["console", "wandb"], "nnodes": 1, "n_gpus_per_node": 8}
    assert any("actor_rollout_ref.model.path through a shell variable" in note for note in notes)
    run = read_run(path, Cluster(2, 8))
    assert run.cluster == Cluster(1, 8) and run.job_source == OVERRIDES  # not the flags' 2 x 8
    advice = advise([path], Cluster(2, 8))
    assert advice.job.rollout_gpus == 4 and advice.job.config_source == OVERRIDES
    assert all(c.prediction.actor_gpus % 4 == 0 for c in advice.candidates)
    assert {"7:1", "6:2", "5:3"} <= {name for name, _ in advice.rejected}


def test_a_log_with_neither_says_so(tmp_path):
    advice = advise([run_file(tmp_path / "stock.jsonl", NEAR_LINEAR, n=8)], Cluster(1, 8))
    assert advice.job.rollout_gpus == 1 and advice.job.requirements.batch is None
    assert any("neither verl's printed config nor the command's overrides" in n for n in advice.job.notes)
    offered = {name for c in advice.candidates for name in (c.placement, *c.same_prediction_as)}
    assert "6:2" in offered  # nothing to refuse it by


# --------------------------------------------------------------------------- verl's Qwen3-8B recipes


@pytest.mark.parametrize("nnodes", [1, 2])
def test_fsdp_recipe_candidates_are_the_planners(tmp_path, qwen3_8b, nnodes):
    config = fsdp_recipe(nnodes, qwen3_8b)
    advice = advise([console_of(tmp_path / "run.log", config, 8 * nnodes)], Cluster(nnodes, 8))
    assert advice.job.rollout_gpus == 2
    assert all(c.prediction.actor_gpus % 2 == 0 for c in advice.candidates)
    assert_every_candidate_is_the_planners(advice, OmegaConf.to_container(config, resolve=True))


@pytest.mark.parametrize("nnodes", [1, 2])
def test_megatron_recipe_candidates_are_the_planners(tmp_path, qwen3_8b, nnodes):
    config = recipe(PPO_8B, PPO_8B_DEFAULTS, nnodes, qwen3_8b)
    advice = advise([console_of(tmp_path / "run.log", config, 8 * nnodes)], Cluster(nnodes, 8))
    assert {mesh.role for mesh in advice.job.requirements.megatron} >= {"actor", "critic"}
    for c in advice.candidates:  # TP=2 x PP=2 meshes: every pool a multiple of 4
        assert c.prediction.actor_gpus % 4 == 0 and (c.prediction.colocated or c.prediction.critic_gpus % 4 == 0)
    assert_every_candidate_is_the_planners(advice, OmegaConf.to_container(config, resolve=True))


def test_the_real_logs_echoed_command_gives_the_same_job_without_its_config(tmp_path):
    lines = REAL_LOG.read_text(encoding="utf-8").splitlines(keepends=True)
    # The config's pprint: the lines of main_task that carry on the dict (its head and its indented rest).
    kept = [line for line in lines if not line.startswith(("(main_task pid=300765) {", "(main_task pid=300765)  "))]
    path = tmp_path / "no_config.log"
    path.write_text("".join(kept), encoding="utf-8")
    assert read_log(path).config is None
    run = read_run(path, Cluster(2, 8))
    assert run.job_source == OVERRIDES and run.cluster == Cluster(1, 4)
    advice = advise([path], Cluster(2, 8))
    assert advice.job.rollout_gpus == 4 and "6:2" in dict(advice.rejected)


def test_a_quoted_size_in_the_logs_command_is_refused_naming_the_log(tmp_path):
    steps = [stock_step(NEAR_LINEAR, 8, 1.0) for _ in range(4)]
    path = tmp_path / "run.log"
    command = "+ python3 -m verl.trainer.main_ppo 'actor_rollout_ref.rollout.tensor_model_parallel_size=\"4\"'\n"
    path.write_text(command + console_log("0.9", steps, None))
    with pytest.raises(AdviseError, match=r"run\.log: the overrides echoed .*tensor_model_parallel_size is '4' \(text"):
        read_run(path, Cluster(2, 8))
