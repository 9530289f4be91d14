"""Values streamed into generation's tail on verl's v1 trainer (``verl/trainer/ppo/v1``, ``sync`` mode).

v1 shows each finished trajectory before the batch is sampled: the agent loop puts it into TransferQueue
(partition ``train``, tag ``status: success`` with the step in ``global_steps``) as soon as it ends, while
``ReplayBuffer.sample`` polls until every prompt of the step has settled. So, per step:

1. ``prepare_step`` (the stock method that submits the step's prompts): when the step may stream
   (``why_not_stream``), the CPU rollout's forced tail is armed (``runtime/cpu/hold.py``; a no-op elsewhere),
   the prompts are submitted, and a lane starts on a controller thread. The lane first joins the deferred
   critic update of step k-1 (``deferral.join``): from then on the critic holds step k's weights. It then
   lists the step's finished trajectories, values them in micro-batches on the critic's pool
   (``critic_wg.infer_batch`` on their keys; the workers write the raw ``values`` into TransferQueue, as for
   the stock call) and, once it has valued every finished sample it can see, releases the forced tail.
2. ``ReplayBuffer.sample`` returns (generation is over): the step's coverage is fixed; a failed stream is
   raised here, on the trainer's thread, naming the critic's pool.
3. The stock ``_compute_values`` (on the preparation's values lane, or on the trainer's thread) sees the
   critic's worker group through ``StreamedCriticGroup``: its ``infer_batch`` stops the lane, waits for its
   last micro-batch and dispatches only the samples not yet valued. Stock then reads every sample's values
   from TransferQueue and post-processes them, in its batch's order, as ever.

Exact where the critic's forward is per sample (``stream_values.why_not_exact``): the values of a streamed
sample are computed by the same forward, on the same weights, with the same request flags (checked at the
stock call: should they differ, the streamed values are discarded and the whole batch is valued as stock).
Where it may not stream, one log line names the reason and ``split/stream_values_off`` is 1.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import wrapt

from verl_split.core import log, settings
from verl_split.placement.job_config import trainer_job
from verl_split.placement.model import TRAIN_BATCH
from verl_split.plugin.args import get_argument
from verl_split.runtime.cpu import hold
from verl_split.runtime.overlap import deferral, lanes
from verl_split.runtime.overlap.stream_values import StreamStep, plan_chunk, stepped_aside, why_not_exact
from verl_split.runtime.overlap.trainers import defining_class

logger = logging.getLogger("verl_split.stream_values")

#: Seconds between two looks at TransferQueue for newly finished samples (one call to its controller).
POLL_S = 0.2
#: The forced tail (VERL_SPLIT_CPU_HOLD_AFTER) is released once the lane has valued what the servers answered;
#: should fewer samples ever finish than it expects (a server given fewer requests than it answers), it is
#: released after this long without a newly finished sample, with a warning. A guard, never the path of a test.
STALL_GUARD_S = 120.0
#: Request flags the critic's values forward does not read (verl's FSDPEngineWithValueHead builds values from the
#: model output alone): stock sends old_log_prob's ``calculate_entropy`` along when the preparation is sequential.
IGNORED_FLAGS = frozenset({"calculate_entropy"})
#: The stock methods whose order the lane relies on; a trainer overriding one runs stock.
STREAM_METHODS = ("step", "_step_once", "prepare_step", "_compute_values")


def why_not_stream(trainer: Any, adapter: Any) -> str:
    """Empty when this step's values may be streamed into generation's tail, else the reason not."""
    if not settings.current().stream_values:
        return "VERL_SPLIT_STREAM_VALUES is off"
    if not getattr(trainer, "use_critic", False):
        return "this run has no critic (e.g. GRPO)"
    actor_pool, critic_pool = adapter.pools(trainer)
    if actor_pool is None or actor_pool == critic_pool:
        return f"actor and critic share resource pool {critic_pool!r} (no split placement)"
    mode = getattr(trainer, "trainer_mode", "sync")
    if mode != "sync":
        return f"verl's v1 trainer runs in {mode!r} mode (asynchronous); values are streamed in 'sync' mode only"
    if getattr(trainer, "parameter_sync_step", 1) != 1:
        return "trainer.v1 parameter_sync_step > 1 samples several batches per step"
    for method in STREAM_METHODS:
        owner = defining_class(type(trainer), method)
        if owner is not adapter.trainer_class:
            who = owner.__name__ if owner else type(trainer).__name__
            return f"{who} overrides {method}() (a trainer with its own loop)"
    replay_buffer = getattr(trainer, "replay_buffer", None)
    sampler = defining_class(type(replay_buffer), "sample")
    if replay_buffer is not None and (sampler is None or sampler.__qualname__ != "ReplayBuffer"):
        who = sampler.__name__ if sampler else type(replay_buffer).__name__
        return f"the replay buffer's sample() is {who}'s (trainer.v1.sampler.custom_sampler), not verl's sync one"
    if getattr(replay_buffer, "filter_groups_metric", None) is not None:
        return "dynamic sampling (DAPO's filter_groups) discards and refills groups while they generate"
    if _shared_rollout(trainer):
        return "with shared rollout the critic pool's own servers generate"
    if getattr(trainer, "ref_in_actor", False) and getattr(trainer, "use_reference_policy", False):
        return "the reference runs inside the LoRA actor, and stock passes its no_lora_adapter flag to the critic"
    engine = _critic_engine(trainer)
    if engine is None:
        return "the critic runs on Megatron, whose values forward streaming does not check for exactness"
    return why_not_exact(engine)


def _shared_rollout(trainer: Any) -> bool:
    from verl_split.placement import shared_rollout_from_config

    return bool(shared_rollout_from_config(trainer_job(trainer)))


def _critic_engine(trainer: Any) -> Any:
    """The critic engine's forward-only micro-batching, as verl's v1 trainer hands it to the workers
    (``omega_conf_to_dataclass(config.critic).engine``: the ``critic.fsdp`` block; ``infer_batch`` reads
    ``use_dynamic_bsz`` and ``infer_micro_batch_size_per_gpu`` there, verl/workers/engine_workers.py)."""
    critic = trainer_job(trainer).critic
    if critic.strategy == "megatron":
        return None
    block = critic.fsdp
    return SimpleNamespace(
        use_dynamic_bsz=block.infer_dynamic_bsz, infer_micro_batch_size_per_gpu=block.infer_micro_batch
    )


def wait_for(output: Any) -> Any:
    """Wait for a non-blocking worker-group call (verl's ``DataProtoFuture``: ``futures``), return it; a blocking
    call's result has no futures and is returned as it is."""
    futures = getattr(output, "futures", None)
    if futures:
        import ray

        ray.get(futures)
    return output


def _data_parallel(worker_group: Any) -> int:
    """The critic's data-parallel size on its ``train`` mesh, the one ``infer_batch`` dispatches over."""
    info = getattr(worker_group, "_dispatch_info", {}).get("train")
    if info is None:
        info = worker_group._query_dispatch_info("train")
        worker_group._dispatch_info["train"] = info
    return max(info) + 1


class ValuesLane:
    """The controller thread that values the step's finished samples while the rest generate."""

    def __init__(self, trainer: Any, stream: StreamStep, worker_group: Any, expected: int) -> None:
        self.trainer = trainer
        self.stream = stream
        self.worker_group = worker_group  # the critic's own, not the proxy
        self.expected = expected  # samples the step generates
        temperature = trainer_job(trainer).rollout.temperature
        # What stock _compute_values adds to the request (verl/trainer/ppo/v1/trainer_base.py) on top of the
        # temperature _step_once sets after sampling.
        self.extra_info = {"temperature": temperature, "compute_loss": False}
        self.released = False
        self.answered: int | None = None  # samples the forced tail lets through: asked of Ray once, not every poll
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = lanes.start_lane("verl-split-stream-values", self.run)

    def run(self) -> None:
        try:
            deferral.join("the streamed values")  # step k-1's critic update: the critic holds step k's weights
            data_parallel = _data_parallel(self.worker_group)
            progress_at, seen = time.monotonic(), 0
            # Until generation ends: after it, the step writes other fields (rewards, padding samples) to the
            # same keys, and the stock call values what is left anyway.
            while not self.stream.stop.is_set() and not self.stream.generation_end:
                finished = self.finished()
                chunk = plan_chunk([k for k in finished if k not in self.stream.streamed_set], data_parallel)
                if chunk:
                    self.value(chunk, finished)
                    continue
                if len(finished) != seen:
                    progress_at, seen = time.monotonic(), len(finished)
                self.release_when_caught_up(len(finished), progress_at)
                self.stream.stop.wait(POLL_S)
        except BaseException as exc:  # raised on the trainer's thread at its next seam
            self.stream.failed(exc)
        finally:
            self.release()  # a failed lane must not leave the forced tail held

    def finished(self) -> dict[str, dict]:
        """The step's trajectories in TransferQueue that finished generating, in the order they were listed."""
        import transfer_queue as tq

        listed = (tq.kv_list(partition_id="train") or {}).get("train", {})
        step = self.stream.global_step
        return {
            key: tag
            for key, tag in listed.items()
            if not tag.get("is_prompt", False)
            and tag.get("status") == "success"
            and tag.get("global_steps") == step
            and not tag.get("is_padding", False)
        }

    def value(self, chunk: list[str], tags: dict[str, dict]) -> None:
        from transfer_queue import KVBatchMeta

        meta = KVBatchMeta(
            partition_id="train", keys=chunk, tags=[tags[k] for k in chunk], extra_info=dict(self.extra_info)
        )
        started = time.monotonic()
        wait_for(self.worker_group.infer_batch(meta))
        self.stream.add(chunk, started, time.monotonic())

    def release_when_caught_up(self, finished: int, progress_at: float) -> None:
        """Release the forced tail once every sample the servers answered has been valued."""
        count = settings.current().cpu_hold_after
        if not count or self.released:
            return
        if self.answered is None:
            self.answered = min(count * hold.server_count(), self.expected)
        answered = self.answered
        if finished >= answered:
            self.release()
        elif time.monotonic() - progress_at > STALL_GUARD_S:
            logger.warning(
                "verl-split: %d of the %d samples VERL_SPLIT_CPU_HOLD_AFTER lets through finished in %.0fs; "
                "releasing the held requests",
                finished,
                answered,
                STALL_GUARD_S,
            )
            self.release()

    def release(self) -> None:
        if not self.released:
            self.released = True
            hold.release_all()

    def stop(self) -> None:
        self.stream.stop.set()
        if self.thread is not None:
            self.thread.join()


class StreamedCriticGroup(wrapt.ObjectProxy):
    """The critic's worker group as the step's stock ``_compute_values`` sees it: its ``infer_batch`` values
    only what the lane has not (or, stepped aside, everything, timed)."""

    def __init__(self, worker_group: Any, trainer: Any, lane: ValuesLane | None, reason: str = "") -> None:
        super().__init__(worker_group)
        self._self_trainer = trainer
        self._self_lane = lane
        self._self_reason = reason

    def infer_batch(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        trainer, lane = self._self_trainer, self._self_lane
        if vars(trainer).get("critic_wg") is self:
            trainer.critic_wg = self.__wrapped__  # one values call per step
        started = time.monotonic()
        if lane is None:
            output = wait_for(self.__wrapped__.infer_batch(batch, *args, **kwargs))
            lanes.hand_over_metrics(trainer, stepped_aside(self._self_reason, time.monotonic() - started))
            return output
        stream = lane.stream
        lane.stop()
        stream.generation_ended()  # already, unless sample() was not the stock one
        if stream.failure is not None:
            raise stream.failure_error()
        differs = _flags_differ(lane.extra_info, batch.extra_info or {})
        if differs:
            log.once(
                logger,
                f"Streamed values discarded: the step's values request carries other flags ({differs}) than the "
                "stream's; the whole batch is valued after generation.",
                logging.WARNING,
            )
            stream.streamed_set.clear()
            stream.covered = 0
        rest = stream.rest(batch.keys)
        stream.batch_size = len(batch.keys)
        if rest:
            sub = type(batch)(
                keys=[batch.keys[i] for i in rest],
                tags=[batch.tags[i] for i in rest],
                partition_id=batch.partition_id,
                fields=None if batch.fields is None else list(batch.fields),
                extra_info=dict(batch.extra_info or {}),
            )
            output = wait_for(self.__wrapped__.infer_batch(sub, *args, **kwargs))
        else:
            output = SimpleNamespace(futures=[])  # stock only waits for the futures
        stream.after_generation_s = time.monotonic() - started
        metrics = stream.metrics()
        logger.info(
            "Streamed values (step %s): %d of %d samples valued while generation ran (%.1fs on %s); %d after it, %.1fs",
            stream.global_step,
            stream.covered,
            stream.batch_size,
            stream.busy_s,
            stream.critic_pool,
            len(rest),
            stream.after_generation_s,
        )
        lanes.hand_over_metrics(trainer, metrics)
        return output


def _flags_differ(streamed: dict, stock: dict) -> str:
    keys = (set(streamed) | set(stock)) - IGNORED_FLAGS
    return ", ".join(sorted(k for k in keys if streamed.get(k) != stock.get(k)))


def _restore(trainer: Any) -> None:
    """Undo a step's proxy that its values call never reached (a step that failed before values)."""
    group = vars(trainer).get("critic_wg")
    if isinstance(group, StreamedCriticGroup):
        lane = group._self_lane
        if lane is not None:
            lane.stop()
        trainer.critic_wg = group.__wrapped__


#: The lane of the step under way (one trainer per TaskRunner process).
_current: ValuesLane | None = None


def make_prepare_step_wrapper(adapter: Any) -> Callable[..., Any]:
    """For v1's ``PPOTrainer.prepare_step``: arm the forced tail, submit the step, start the lane."""

    def _wrap_prepare_step(wrapped, trainer, args, kwargs):
        global _current
        _restore(trainer)
        _current = None
        if not getattr(trainer, "use_critic", False):
            lanes.hand_over_metrics(trainer, stepped_aside("this run has no critic (e.g. GRPO)"))
            return wrapped(*args, **kwargs)
        reason = why_not_stream(trainer, adapter)
        if reason:
            trainer.critic_wg = StreamedCriticGroup(trainer.critic_wg, trainer, None, reason)
            return wrapped(*args, **kwargs)
        actor_pool, critic_pool = adapter.pools(trainer)
        stream = StreamStep(trainer.global_steps, critic_pool, actor_pool)
        job = trainer_job(trainer)
        expected = (dict(job.batch.values).get(TRAIN_BATCH) or 0) * (job.rollout.n or 1)
        lane = ValuesLane(trainer, stream, trainer.critic_wg, expected)
        hold.arm_all()
        try:
            result = wrapped(*args, **kwargs)
        except BaseException:
            hold.release_all()
            raise
        trainer.critic_wg = StreamedCriticGroup(trainer.critic_wg, trainer, lane)
        _current = lane
        lane.start()
        return result

    return _wrap_prepare_step


def wrap_sample(wrapped, replay_buffer, args, kwargs):
    """``ReplayBuffer.sample`` (sync mode): it returns once the step's generation is over. The step's coverage is
    fixed here, and a stream that failed ends the run here, on the trainer's thread, naming the critic's pool."""
    result = wrapped(*args, **kwargs)
    lane = _current
    if lane is not None and get_argument(args, kwargs, 1, "partition_id", None) == "train":
        lane.stream.generation_ended()
        if lane.stream.failure is not None:
            raise lane.stream.failure_error()
    return result
