"""verl's batch rules, per family: what each pool must divide, or verl stops in the middle of a step.

verl's own ``validate_config`` (``verl/utils/config.py``) divides the batch by *every* GPU of the run,
the layout where every role shares one pool; under split placement each role runs on its own pool's
data-parallel ranks, and the rules below are checked nowhere before the first step. Each failure comes
after a whole generation. Read from each family's code (0.7.1, 0.8.0 and 0.9.1); where verl asserts each is
a row of ``core.citations`` (named in brackets), which ``tests/core/test_citations.py`` checks against the installed
verl:

Engine workers (0.8, 0.9, and 0.7 with ``trainer.use_legacy_worker_impl=disable``):

* the trainer hands each update a mini-batch of ``ppo_mini_batch_size x rollout.n`` samples (the v1
  trainer's ``PPOTrainer`` in ``trainer/ppo/v1/trainer_base.py``, ``RayPPOTrainer``'s ``_update_actor`` /
  ``_update_critic`` in ``trainer/ppo/ray_trainer.py``);
* ``TrainingWorker.train_mini_batch`` asserts that it splits evenly over the role's data-parallel ranks
  (``workers/engine_workers.py``; mini_batch_split);
* ``make_iterator`` asserts that a rank's rows are whole mini-batches (``utils/tensordict_utils.py``;
  mini_batch_iterator);
* ``prepare_micro_batches`` asserts, without dynamic batch sizes, that a rank's rows are whole
  micro-batches (``workers/engine/utils.py``; micro_batches). The actor trains with
  ``actor.ppo_micro_batch_size_per_gpu`` and computes log-probs with
  ``rollout.log_prob_micro_batch_size_per_gpu``, the reference with ``ref.log_prob_micro_batch_size_per_gpu``
  (``engine_workers.py`` ``ActorRolloutRefWorker.init_model``). The critic's engine keeps its engine default,
  dynamic batch sizes (``workers/config/engine.py`` ``use_dynamic_bsz: bool = True``; the trainers copy
  only the token budgets: ``PPOTrainer._setup``, ``RayPPOTrainer.init_workers``), so its micro-batch sizes set
  no rule.
* Rows: the v1 trainer (0.9, ``trainer.use_v1=true``) pads the batch to a multiple of
  ``lcm(actor dp, critic mini-batch, actor mini-batch)`` (``PPOTrainer._get_required_batch_multiple``;
  v1_batch_multiple), and its dispatch splits a batch unevenly where it must (TransferQueue's
  ``KVBatchMeta.chunk``). The ``RayPPOTrainer`` (0.7, 0.8, 0.9 with ``use_v1=false``) does not: its
  ``_balance_batch`` splits ``train_batch_size x rollout.n`` rows into equal parts per actor rank
  (``ray_trainer.py``; balance_batch), and every dispatch asserts an even split per rank
  (``chunk_tensordict``, ``utils/tensordict_utils.py``; chunk_tensordict).

Legacy workers (0.7's default, ``workers/fsdp_workers.py``):

* the actor's mini-batch per rank is ``ppo_mini_batch_size x rollout.n // dp`` and must be above 0 and a
  multiple of the micro-batch per GPU, a global ``ppo_micro_batch_size`` being divided by dp first
  (``ActorRolloutRefWorker.__init__``; legacy_actor_batch); the same for the critic (``CriticWorker.__init__``;
  legacy_critic_batch); global log-prob and forward micro-batches are divided by dp there
  (legacy_log_prob_batch) and must stay above 0;
* every dispatch splits the rows evenly per rank (``protocol.py`` ``DataProto.chunk``; legacy_chunk).

Generation sets no batch rule on a pool (the agent loop sends requests to the servers); rollout and
reward-model replicas need whole replicas on their pool, which ``planner`` checks.
"""

from __future__ import annotations

import math

from verl_split.placement.batch_problem import CITES, WORKERS_START, Problem
from verl_split.placement.batch_vpp import vpp_problems
from verl_split.placement.model import (
    ACTOR_MICRO,
    ACTOR_MICRO_GLOBAL,
    ACTOR_MINI,
    CRITIC_FORWARD_GLOBAL,
    CRITIC_MICRO,
    CRITIC_MICRO_GLOBAL,
    CRITIC_MINI,
    LOG_PROB_GLOBAL,
    LOG_PROB_MICRO,
    REF_GLOBAL,
    REF_MICRO,
    ROLLOUT_N,
    TRAIN_BATCH,
    BatchConfig,
)

__all__ = ["CITES", "WORKERS_START", "Problem", "problems"]


def problems(batch: BatchConfig, dp: dict[str, int]) -> list[Problem]:
    """Every rule of ``batch.rules`` broken by pools of these data-parallel sizes (role -> dp)."""
    if batch.rules == "legacy":
        return _legacy(batch, dp)
    return _engine(batch, dp)


def _mini(batch: BatchConfig, role: str) -> tuple[str, int] | None:
    key = ACTOR_MINI if role == "actor" else CRITIC_MINI
    value = batch.get(key)
    return None if value is None else (key, value * batch.n)


def _times_n(batch: BatchConfig, key: str) -> str:
    return f"{key}={batch.get(key)} x {ROLLOUT_N}={batch.n}"


def _engine(batch: BatchConfig, dp: dict[str, int]) -> list[Problem]:
    cite = CITES[batch.family]
    found: list[Problem] = []
    minis: dict[str, int] = {}
    for role in ("actor", "critic"):
        mini = _mini(batch, role) if role in dp else None
        if mini is None:
            continue
        key, samples = mini
        if samples % dp[role]:
            found.append(
                Problem(
                    role,
                    f"a mini-batch of {_times_n(batch, key)} = {samples} samples does not split over its "
                    f"{dp[role]} data-parallel ranks ({samples} % {dp[role]} = {samples % dp[role]})",
                    cite["mini"],
                    (key,),
                )
            )
            continue
        minis[role] = samples
        micro = batch.get(ACTOR_MICRO) if role == "actor" else None  # the critic's engine: dynamic (docstring)
        per_rank = samples // dp[role]
        if micro and "actor" not in batch.dynamic and per_rank % micro:
            found.append(
                Problem(
                    role,
                    f"its {samples // dp[role]} samples of a mini-batch per rank ({samples} / {dp[role]}) are not "
                    f"whole micro-batches of {ACTOR_MICRO}={micro}",
                    cite["micro"],
                    (key, ACTOR_MICRO),
                )
            )
    rows = batch.rows
    if rows is None:
        return found + vpp_problems(batch, dp, minis, None)
    if batch.rules == "v1":
        multiple = math.lcm(dp.get("actor", 1), *minis.values())
        rows = -(-rows // multiple) * multiple  # the v1 trainer pads (docstring)
        padded = f"the {batch.rows} rows padded to {rows} (v1 pads to a multiple of {multiple})"
    else:
        padded = f"{TRAIN_BATCH}={batch.get(TRAIN_BATCH)} x {ROLLOUT_N}={batch.n} = {rows} rows"
        for role in ("actor", "ref", "critic"):
            if role in dp and rows % dp[role]:
                where = cite["balance"] if role == "actor" else cite["chunk"]
                found.append(
                    Problem(
                        role,
                        f"{padded} do not split over its {dp[role]} data-parallel ranks ({rows} % {dp[role]} = "
                        f"{rows % dp[role]})",
                        where,
                        (TRAIN_BATCH,),
                    )
                )
        for role, samples in minis.items():
            if rows % dp[role] == 0 and rows % samples:
                found.append(
                    Problem(
                        role,
                        f"{padded} are not whole mini-batches of {samples} ({rows} % {samples} = {rows % samples})",
                        cite["iterator"],
                        (TRAIN_BATCH, ACTOR_MINI if role == "actor" else CRITIC_MINI),
                    )
                )
    for role, key, dynamic in (("actor", LOG_PROB_MICRO, "log_prob"), ("ref", REF_MICRO, "ref")):
        micro = batch.get(key)
        if role not in dp or not micro or dynamic in batch.dynamic or rows % dp[role]:
            continue
        per_rank = rows // dp[role]
        if per_rank % micro:
            found.append(
                Problem(
                    role,
                    f"{padded} give each of its {dp[role]} ranks {per_rank} rows to compute log-probs on, not whole "
                    f"micro-batches of {key}={micro}",
                    cite["micro"],
                    (key, TRAIN_BATCH),
                )
            )
    return found + vpp_problems(batch, dp, minis, rows)


def _legacy(batch: BatchConfig, dp: dict[str, int]) -> list[Problem]:
    cite = CITES["0.7"]
    found: list[Problem] = []
    rows = batch.rows
    if rows is not None:
        for role in ("actor", "ref", "critic"):
            if role in dp and rows % dp[role]:
                found.append(
                    Problem(
                        role,
                        f"{TRAIN_BATCH}={batch.get(TRAIN_BATCH)} x {ROLLOUT_N}={batch.n} = {rows} rows do not split "
                        f"over its {dp[role]} data-parallel ranks ({rows} % {dp[role]} = {rows % dp[role]})",
                        cite["legacy_chunk"],
                        (TRAIN_BATCH,),
                    )
                )
    for role, micro_key, global_key, where in (
        ("actor", ACTOR_MICRO, ACTOR_MICRO_GLOBAL, cite["legacy_actor"]),
        ("critic", CRITIC_MICRO, CRITIC_MICRO_GLOBAL, cite["legacy_critic"]),
    ):
        mini = _mini(batch, role) if role in dp and role not in batch.megatron else None
        if mini is None:
            continue
        key, samples = mini
        per_rank = samples // dp[role]
        if per_rank == 0:
            found.append(
                Problem(
                    role,
                    f"a mini-batch of {_times_n(batch, key)} = {samples} samples gives each of its {dp[role]} "
                    "data-parallel ranks 0 samples",
                    where,
                    (key,),
                    WORKERS_START,
                )
            )
            continue
        micro, micro_text = batch.get(micro_key), f"{micro_key}={batch.get(micro_key)}"
        global_micro = batch.get(global_key)
        if global_micro is not None:
            micro, micro_text = global_micro // dp[role], f"{global_key}={global_micro} / {dp[role]} ranks"
            if micro == 0:
                found.append(Problem(role, f"{micro_text} is 0 samples per rank", where, (global_key,)))
                continue
        if micro and per_rank % micro:
            found.append(
                Problem(
                    role,
                    f"its {per_rank} samples of a mini-batch per rank ({_times_n(batch, key)} = {samples}, "
                    f"// {dp[role]}) are not whole micro-batches of {micro_text}",
                    where,
                    (key, global_key if global_micro is not None else micro_key),
                    WORKERS_START,
                )
            )
    for role, key, where in (
        ("actor", LOG_PROB_GLOBAL, cite["legacy_log_prob"]),
        ("ref", REF_GLOBAL, cite["legacy_log_prob"]),
        ("critic", CRITIC_FORWARD_GLOBAL, cite["legacy_critic"]),
    ):
        value = batch.get(key)
        if role in dp and role not in batch.megatron and value is not None and value // dp[role] == 0:
            found.append(Problem(role, f"{key}={value} / {dp[role]} ranks is 0 samples per rank", where, (key,)))
    return found
