"""What the deferred critic update keeps resident, checked before Ray starts: TransferQueue's capacity on
verl's v1 trainer, the driver's extra batch on ``RayPPOTrainer``.

With ``defer_critic`` (part of ``VERL_SPLIT_OVERLAP=on``, the default) step k's critic update runs on into
step k+1 and reads step k's data until it is joined at step k+1's values (``runtime/overlap/deferral.py``).
So two steps' data are resident at once where stock verl holds one.

verl 0.9's v1 trainer keeps every sample of a step in TransferQueue from generation until the step's
``kv_clear`` (``PPOTrainer.fit`` in ``verl/trainer/ppo/v1/trainer_base.py``); the deferral postpones that clear
to the join, by which time step k+1 has generated and padded its own samples. What one step stores:

* ``train_batch_size x rollout.n`` trajectories, one key each (the prompts' own keys carry tags only, and a
  put without fields stores nothing: ``transfer_queue`` ``kv_batch_put``);
* padding samples with keys of their own, up to a multiple of ``lcm(actor dp, critic mini x n, actor mini
  x n)`` (``_balance_batch`` and ``_get_required_batch_multiple``, ``trainer_base.py``; ``core.citations``
  v1_batch_multiple;
  ``verl/trainer/ppo/padding_utils.py`` ``upsample_batch_to_divisible_size``);
* with DAPO's group filter (``algorithm.filter_groups.enable``), up to ``max_inflight_gen_batches x
  train_batch_size`` prompts generating beside the finished groups before the replay buffer selects
  (``verl/trainer/ppo/v1/replay_buffer.py`` ``ReplayBuffer.sample``).

TransferQueue's ``SimpleStorage`` holds ``transfer_queue.backend.SimpleStorage.total_storage_size`` samples
(verl 0.9.1 sets 100000, ``verl/trainer/config/transfer_queue/transfer_queue.yaml``; null is unlimited),
split evenly over ``num_data_storage_units`` units; a put beyond a unit's share raises "Storage capacity
exceeded" (``transfer_queue/storage/simple_storage.py`` ``StorageUnitData.put_data``), mid-run. Other
backends size in bytes and are not checked.

``RayPPOTrainer`` holds step k's ``DataProto`` on the driver (verl's TaskRunner process) until the join.
Which node that process runs on, and its memory, are Ray's choice, unknown before Ray: a warning with the
estimated bytes when they are large.

Pure: reads the job's view (``placement.job``) only; each public function takes it or verl's config to read it from.
"""

from __future__ import annotations

import math
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement.batch_config import batch_of
from verl_split.placement.job import Job
from verl_split.placement.job_config import as_job
from verl_split.placement.model import ACTOR_MINI, CRITIC_MINI, TRAIN_BATCH, Plan

STORAGE = "transfer_queue.backend.SimpleStorage"
CAPACITY_KEY = f"{STORAGE}.total_storage_size"
OFF = "VERL_SPLIT_OVERLAP=updates,prep"
#: A held v0 batch this large gets a warning.
DRIVER_WARNING_BYTES = 1 << 30
#: Bytes of one sample of a v0 batch per prompt token and per response token: int64 prompts, input_ids,
#: attention_mask, position_ids (4 x 8 per prompt token); those three, responses and response_mask
#: (5 x 8) plus eight float32 fields (old_log_probs, ref_log_prob, values, token_level_scores,
#: token_level_rewards, advantages, returns, rollout_log_probs: 8 x 4) per response token.
BYTES_PER_PROMPT_TOKEN = 32
BYTES_PER_RESPONSE_TOKEN = 72


def why_no_deferral(config: Job | Any, plan: Plan, defer: bool) -> str:
    """Empty when the critic's update will run on into the next step, else why not (as the runtime decides)."""
    if not defer:
        return "VERL_SPLIT_OVERLAP does not include defer_critic"
    actor, critic = plan.pool_of("actor"), plan.pool_of("critic")
    if critic is None or actor is None or critic.name == actor.name:
        return "the critic has no pool of its own"
    job = as_job(config)
    if job.trainer.profiler_steps:
        return "verl's profiler (global_profiler.steps) is on"
    if job.batch.train_batch_set and job.rules == "v1":
        mode = job.trainer.v1_mode
        if mode != "sync":
            return f"verl's v1 trainer runs in {mode!r} mode"
        if job.trainer.parameter_sync_step != 1:
            return "trainer.v1 parameter_sync_step > 1"
    return ""


def check_deferral_capacity(config: Job | Any, plan: Plan, defer: bool) -> str | None:
    """Refuse a v1 run whose two resident steps overflow TransferQueue; return a warning for a v0 run whose
    driver holds a large extra batch; None when there is nothing to say."""
    job = as_job(config)
    batch = batch_of(job)
    if batch is None or batch.rows is None or why_no_deferral(job, plan, defer):
        return None
    if batch.rules == "v1":
        _check_transfer_queue(job, plan)
        return None
    return _driver_warning(job, batch.get(TRAIN_BATCH) or 0, batch.n)


def step_samples(config: Job | Any, plan: Plan) -> tuple[int, int, int]:
    """(samples a step stores after padding, the padding multiple, samples stored while the next step generates)."""
    job = as_job(config)
    batch = batch_of(job)
    assert batch is not None and batch.rows is not None
    actor = plan.pool_of("actor")
    assert actor is not None
    multiple = max(1, actor.size // batch.divisor("actor"))
    for key in (CRITIC_MINI, ACTOR_MINI):
        mini = batch.get(key)
        if mini:
            multiple = math.lcm(multiple, mini * batch.n)
    padded = -(-batch.rows // multiple) * multiple
    generating = batch.rows
    if job.algorithm.filter_groups:
        generating = (1 + job.algorithm.max_inflight_gen_batches) * batch.rows
    return padded, multiple, generating


def _check_transfer_queue(job: Job, plan: Plan) -> None:
    queue = job.transfer_queue
    capacity, units = queue.capacity, queue.units
    if queue.backend != "SimpleStorage" or capacity is None:
        return  # unlimited (null), or sized in bytes by another backend
    padded, multiple, generating = step_samples(job, plan)
    peak = padded + max(padded, generating)
    if peak <= capacity:
        return
    batch = job.batch.get(TRAIN_BATCH)
    n = job.rollout.n or 1
    step = f"{padded} samples a step (data.train_batch_size={batch} x actor_rollout_ref.rollout.n={n}"
    step += f", padded to a multiple of {multiple})" if padded != batch * n else ")"
    if generating > padded:
        step += (
            f", and up to {generating} while the next step generates under DAPO's group filter "
            "(algorithm.filter_groups.max_inflight_gen_batches)"
        )
    headroom = -(-(peak + peak // 10) // units) * units
    raise_it = (
        f"raise it: {CAPACITY_KEY}={headroom} ({peak} plus 10 % headroom: TransferQueue splits it evenly over "
        f"its num_data_storage_units={units} storage units)"
    )
    alone = max(padded, generating)
    if alone > capacity:
        fix = f"To fix, {raise_it}; stock verl overflows it too, with {alone} samples of one step."
    else:
        fix = f"To fix, {raise_it}, or turn the deferral off with {OFF}."
    raise PlacementError(
        f"the deferred critic update (VERL_SPLIT_OVERLAP defer_critic, on by default) keeps step k's samples in "
        f"TransferQueue until step k+1's values, so two steps are stored at once: {step}; {peak} at the peak, "
        f"more than {CAPACITY_KEY}={capacity}. TransferQueue would refuse the next step's samples mid-run "
        f"('Storage capacity exceeded'). {fix}"
    )


def held_batch_bytes(config: Job | Any, samples: int) -> int:
    """Estimated bytes of a v0 batch of ``samples`` samples at the config's maximum lengths."""
    data = as_job(config).batch
    prompt = 512 if data.max_prompt_length is None else data.max_prompt_length
    response = 512 if data.max_response_length is None else data.max_response_length
    return samples * (BYTES_PER_PROMPT_TOKEN * prompt + BYTES_PER_RESPONSE_TOKEN * response)


def _driver_warning(job: Job, batch: int, n: int) -> str | None:
    held = held_batch_bytes(job, batch * n)
    if held < DRIVER_WARNING_BYTES:
        return None
    return (
        f"the deferred critic update (VERL_SPLIT_OVERLAP defer_critic) keeps step k's batch on the driver (verl's "
        f"TaskRunner process) until step k+1's values: about {held / (1 << 30):.1f} GiB more than stock at the "
        f"peak ({batch} x {n} samples of up to data.max_prompt_length + data.max_response_length tokens, "
        f"{held // (batch * n)} bytes a sample, estimated). Which node runs that process, and its memory, is "
        f"Ray's choice: make sure it has the room, or turn the deferral off with {OFF}."
    )
