#!/usr/bin/env bash
# PPO with split placement on one node of 8 GPUs: deepseek-llm-7b-chat as actor and critic on
# GSM8K, vLLM rollout, FSDP training. The default placement (halves) gives GPUs 0-3 to the actor,
# rollout and ref and GPUs 4-7 to the critic; the two updates of every step run at the same time.
#
#   bash run_deepseek7b_llm.sh                                  # halves: 4 + 4 GPUs
#   bash run_deepseek7b_llm.sh split_placement.placement=6:2 data.train_batch_size=1152 actor_rollout_ref.actor.ppo_mini_batch_size=384
#   NNODES=2 bash run_deepseek7b_llm.sh                         # halves on 2 nodes: one node per side
#   NNODES=2 bash run_deepseek7b_llm.sh split_placement.placement=per-node
#
# Any hydra override given after the script name comes last, so it wins. Batch sizes are split over
# each pool's GPUs, not over all of them: 6:2 needs a batch and a mini-batch that 6 (and 2) GPUs
# split evenly, hence its two batch overrides (the planner refuses 6:2 with 1024 / 256 before Ray
# starts, naming the sizes that fit; `verl-split plan` shows it without a GPU, see the README).
#
# The data: verl's examples/data_preprocess/gsm8k.py (in verl's repository) writes
# train.parquet and test.parquet into ~/data/gsm8k. Install: verl as verl documents it (its uv environment
# or a verlai/verl image), then verl-split from its checkout, `pip install /path/to/verl-split`, into that
# environment (the README, Run it).
set -xeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
MODEL_PATH="${MODEL_PATH:-deepseek-ai/deepseek-llm-7b-chat}"
TRAIN_FILE="${TRAIN_FILE:-$HOME/data/gsm8k/train.parquet}"
VAL_FILE="${VAL_FILE:-$HOME/data/gsm8k/test.parquet}"
NNODES="${NNODES:-1}"
N_GPUS_PER_NODE="${N_GPUS_PER_NODE:-8}"

# Sizes are per pool, not per node: with halves each side has 4 GPUs. A rollout tensor parallel
# size of 2 makes two vLLM replicas there (three with 6:2); the planner stops a placement whose
# actor pool it does not divide, or whose pools cannot split the batch below.
# The KL penalty in the reward uses the reference policy, which lives in the actor's pool; its
# parameters are offloaded since it only runs forward passes. Every key here exists in verl 0.7,
# 0.8 and 0.9 (the critic's FSDP block moved: critic.model.fsdp_config in 0.7, critic.fsdp after;
# its defaults, no offload, are what this run wants, so it is not set).
"$PYTHON" "$HERE/main_ppo_split.py" \
    algorithm.adv_estimator=gae \
    algorithm.use_kl_in_reward=true \
    algorithm.kl_penalty=kl \
    algorithm.kl_ctrl.type=fixed \
    algorithm.kl_ctrl.kl_coef=0.001 \
    data.train_files="$TRAIN_FILE" \
    data.val_files="$VAL_FILE" \
    data.train_batch_size=1024 \
    data.max_prompt_length=512 \
    data.max_response_length=512 \
    data.filter_overlong_prompts=true \
    data.truncation=error \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=true \
    actor_rollout_ref.model.enable_gradient_checkpointing=true \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=256 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=false \
    actor_rollout_ref.actor.fsdp_config.param_offload=false \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=false \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.fsdp_config.param_offload=true \
    critic.model.path="$MODEL_PATH" \
    critic.model.use_remove_padding=false \
    critic.model.enable_gradient_checkpointing=true \
    critic.optim.lr=1e-5 \
    critic.ppo_micro_batch_size_per_gpu=8 \
    trainer.critic_warmup=0 \
    trainer.logger='[console]' \
    trainer.project_name=verl_example_gsm8k \
    trainer.experiment_name=deepseek_llm_7b_split_placement \
    trainer.nnodes="$NNODES" \
    trainer.n_gpus_per_node="$N_GPUS_PER_NODE" \
    trainer.save_freq=-1 \
    trainer.test_freq=10 \
    trainer.total_epochs=15 \
    "$@"
