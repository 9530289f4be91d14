"""Compute the critic's values beside the actor's old_log_prob + ref (verl issue 324).

In each step with a critic, stock verl prepares the experience one phase after the other:
``_compute_old_log_prob`` and ``_compute_ref_log_prob`` on the actor's pool, then
``_compute_values`` on the critic's. None reads another's output, so under split placement
values can run while the actor pool works. verl-split keeps the three stock methods and
changes only *when* values runs:

1. At the entry of the step's first actor-side call (``_compute_old_log_prob``, or
   ``_compute_ref_log_prob`` in verl's bypass mode), the batch is final (balanced, reward
   merged). A private snapshot of it is taken -- stock code mutates the batch in place
   (``DataProto.union`` in ``RayPPOTrainer.fit``, ``extra_info`` in v1) -- and the stock
   ``_compute_values`` starts on it on a controller thread.
2. The trainer's thread runs the stock old_log_prob and ref as they are. At ref's entry, a
   values call that already failed is raised at once.
3. The stock call to ``_compute_values`` that follows joins the thread and returns what the
   stock call returns; ``fit`` merges it at its stock place, so every mutation of the
   step's batch keeps its stock order and the numbers are those of the same run without
   the overlap.

When it must not overlap (a single pool, no critic, a trainer that overrides the step or
these methods, v1 with the reference inside a LoRA actor, ``VERL_SPLIT_OVERLAP`` without
``prep``), the three calls run one after the other, still timed, and one log line names
the reason. The step's ``split/prep_*`` metrics reach verl's tracker through the update
that follows (``overlap._Step.finish``); the design memo with verl's file:line is
``shared/research/compute_overlap.md`` in the project's workspace.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl_split import overlap, settings
from verl_split.errors import PrepFailedError

logger = logging.getLogger("verl_split.prep")

# The attribute a trainer carries from the step's first actor-side call to its values call.
_STEP_ATTR = "_verl_split_prep"
# The finished step's metrics, until the update phase reports them (see take_metrics).
_METRICS_ATTR = "_verl_split_prep_metrics"
# Set on the controller thread, so its own call to _compute_values passes straight through.
_controller = threading.local()

#: The stock methods the overlap moves in time; a trainer overriding one of them runs stock.
PREP_METHODS = ("_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values")


class V0Prep(overlap.V0Adapter):
    """``RayPPOTrainer`` (every family): ``_compute_*(batch)`` are pure and return new DataProtos;
    ``fit`` merges them into the step's batch in place (``batch.union`` returns ``self``)."""

    def snapshot(self, batch: Any) -> Any:
        # New TensorDict and dicts over the same tensors: fit's unions add keys to the step's
        # batch while the critic's dispatch iterates over this one. select() without key
        # lists would hand back the same TensorDict.
        return batch.select(
            batch_keys=list(batch.batch.keys()),
            non_tensor_batch_keys=list(batch.non_tensor_batch),
            meta_info_keys=list(batch.meta_info),
        )

    def same_batch(self, launched: Any, batch: Any) -> bool:
        return launched is batch

    def values_call(self, snapshot: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return (snapshot,), {}

    def values_result(self, step: _PrepStep, result: Any, args: tuple, kwargs: dict) -> Any:
        return result

    def why_not(self, trainer: Any) -> str:
        return ""


class V1Prep(overlap.V1Adapter):
    """v1 ``PPOTrainer``: ``_compute_*(batch, metrics)`` take a ``KVBatchMeta`` whose data lives in
    TransferQueue, write their fields there, and return the (possibly new) meta."""

    def snapshot(self, batch: Any) -> Any:
        # Every compute method updates batch.extra_info; KVBatchMeta deep-copies tags and
        # extra_info on construction, so the critic's request cannot race old_log_prob's.
        return type(batch)(
            keys=list(batch.keys),
            tags=batch.tags,
            partition_id=batch.partition_id,
            fields=None if batch.fields is None else list(batch.fields),
            extra_info=dict(batch.extra_info or {}),
        )

    def same_batch(self, launched: Any, batch: Any) -> bool:
        # old_log_prob returns the meta of its TransferQueue put: the same samples, a new object.
        return list(launched.keys) == list(batch.keys) and launched.partition_id == batch.partition_id

    def values_call(self, snapshot: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        args, kwargs, _ = self.private_metrics_call(args, kwargs)
        return (snapshot, *args[1:]), {k: v for k, v in kwargs.items() if k != "batch"}

    def values_result(self, step: _PrepStep, result: Any, args: tuple, kwargs: dict) -> Any:
        # Stock returns its input after adding the critic's request flags to its extra_info.
        batch = overlap._batch(args, kwargs)
        added = {k: v for k, v in (step.snapshot.extra_info or {}).items() if step.extra_info_before.get(k) != v}
        if batch.extra_info is None:
            batch.extra_info = {}
        batch.extra_info.update(added)
        return batch

    def why_not(self, trainer: Any) -> str:
        if getattr(trainer, "ref_in_actor", False) and getattr(trainer, "use_reference_policy", False):
            # verl/trainer/ppo/v1/trainer_base.py _compute_ref_log_prob sets no_lora_adapter in the
            # shared extra_info, which stock then sends along with the critic's request
            # (TrainingWorker.infer_batch turns the critic's adapter off). A snapshot taken
            # before ref would not carry it, so the critic would compute other values.
            return (
                "the reference policy runs inside the LoRA actor (ref_in_actor), and stock verl passes its "
                "no_lora_adapter flag on to the critic's values call"
            )
        return ""


@dataclass
class _PrepStep:
    """One step's preparation: old_log_prob + ref on the actor's pool, values on the critic's."""

    trainer: Any
    adapter: Any
    actor_pool: str | None
    critic_pool: str | None
    batch: Any  # the batch of the step's first actor-side call
    overlapped: bool = False
    actor: overlap._Interval = field(default_factory=overlap._Interval)
    actor_busy_s: float = 0.0  # old_log_prob + ref, summed
    critic: overlap._Interval = field(default_factory=overlap._Interval)
    snapshot: Any = None
    extra_info_before: dict = field(default_factory=dict)
    values_future: concurrent.futures.Future | None = None
    aborted: bool = False

    # -- the critic's lane, on a controller thread ---------------------------------------
    def launch_values(self, args: tuple, kwargs: dict) -> None:
        self.snapshot = self.adapter.snapshot(self.batch)
        self.extra_info_before = dict(getattr(self.snapshot, "extra_info", None) or {})
        call_args, call_kwargs = self.adapter.values_call(self.snapshot, args, kwargs)
        self.values_future = concurrent.futures.Future()
        self.overlapped = True
        logger.info(
            "Starting values on %s beside old_log_prob and ref on %s (step %s)",
            self.critic_pool,
            self.actor_pool,
            self.trainer.global_steps,
        )
        # A daemon thread, not an executor: a failed step must not keep the process from exiting.
        threading.Thread(
            target=self._run_values, args=(call_args, call_kwargs), name="verl-split-values", daemon=True
        ).start()

    def _run_values(self, args: tuple, kwargs: dict) -> None:
        _controller.active = True
        self.critic.start = time.monotonic()
        try:
            result = self.trainer._compute_values(*args, **kwargs)
        except BaseException as exc:  # handed to the trainer's thread, which raises it
            self.critic.end = time.monotonic()
            self.values_future.set_exception(exc)
        else:
            self.critic.end = time.monotonic()
            self.values_future.set_result(result)

    def raise_if_values_failed(self) -> None:
        future = self.values_future
        if future is not None and future.done() and future.exception() is not None:
            self.join_values()

    def join_values(self) -> Any:
        try:
            return self.values_future.result()
        except Exception as exc:
            self.aborted = True
            raise self.failure("critic", "values", exc) from exc

    def failure(self, role: str, phase: str, exc: BaseException) -> PrepFailedError:
        pool, other = (self.critic_pool, "old_log_prob and ref") if role == "critic" else (self.actor_pool, "values")
        return PrepFailedError(
            f"the {role}'s {phase} failed on resource pool {pool!r} (step {self.trainer.global_steps}) while {other} "
            f"ran on the other pool: {type(exc).__name__}: {exc}. The run stops here. To tell the two apart, rerun "
            f"with VERL_SPLIT_OVERLAP=updates (preparation one phase after the other)."
        )

    # -- after all three -------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        lanes = [lane for lane in (self.actor, self.critic) if lane.end]
        if not lanes:
            return {}
        wall = max(lane.end for lane in lanes) - min(lane.start for lane in lanes)
        shared = 0.0
        if self.actor.end and self.critic.end:
            shared = max(0.0, min(self.actor.end, self.critic.end) - max(self.actor.start, self.critic.start))
        return {
            "split/prep_actor_s": self.actor_busy_s,
            "split/prep_critic_s": self.critic.seconds,
            "split/prep_wall_s": wall,
            "split/prep_overlap_s": shared,
            # 1 only when both lanes were really in flight at once.
            "split/prep_overlapped": float(self.overlapped and shared > 0.0),
        }

    def finish(self) -> None:
        metrics = self.metrics()
        if not metrics:
            return
        if self.overlapped:
            logger.info(
                "Preparation: old_log_prob + ref %.1fs, values %.1fs, wall %.1fs, overlap %.1fs",
                metrics["split/prep_actor_s"],
                metrics["split/prep_critic_s"],
                metrics["split/prep_wall_s"],
                metrics["split/prep_overlap_s"],
            )
        vars(self.trainer).setdefault(_METRICS_ATTR, {}).update(metrics)
        n = self.trainer.global_steps
        if self.actor.end:
            overlap.record_interval(f"old_log_prob + ref (step {n})", f"actor pool: {self.actor_pool}", self.actor)
        if self.critic.end:
            overlap.record_interval(f"values (step {n})", f"critic pool: {self.critic_pool}", self.critic)


def take_metrics(trainer: Any) -> dict[str, float]:
    """The ``split/prep_*`` metrics of the trainer's last preparation, once."""
    return vars(trainer).pop(_METRICS_ATTR, {})


_warned: set[str] = set()


def _why_sequential(trainer: Any, adapter: Any, actor_pool: str | None, critic_pool: str | None) -> str:
    """Empty when this step's preparation may overlap, else the reason it runs one phase after the other."""
    if not settings.read().overlap_prep:
        return "VERL_SPLIT_OVERLAP does not include prep"
    if not adapter.runs_stock_step(trainer):
        return f"{type(trainer).__name__} overrides {adapter.step_method}(), so the order of its phases is unknown"
    for method in PREP_METHODS:
        # Looked up in the class dicts: our wrappers are descriptors, getattr would bind a new one.
        owner = next(c for c in type(trainer).__mro__ if method in vars(c))
        if owner is not adapter.trainer_class:
            return f"{owner.__name__} overrides {method}()"
    if actor_pool is None or actor_pool == critic_pool:
        return f"actor and critic share resource pool {critic_pool!r}"
    return adapter.why_not(trainer)


def _log_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        logger.info("Preparation (old_log_prob, ref, values) runs one phase after the other: %s.", reason)


def _new_step(trainer: Any, adapter: Any, batch: Any, args: tuple, kwargs: dict) -> _PrepStep:
    actor_pool, critic_pool = adapter.pools(trainer)
    step = _PrepStep(trainer, adapter, actor_pool, critic_pool, batch)
    reason = _why_sequential(trainer, adapter, actor_pool, critic_pool)
    if reason:
        _log_once(reason)
    else:
        step.launch_values(args, kwargs)
    return step


def make_actor_compute_wrapper(adapter: Any) -> Callable[..., Any]:
    """For ``_compute_old_log_prob`` and ``_compute_ref_log_prob``: launch values at the first, time both."""

    def _wrap_actor_compute(wrapped, trainer, args, kwargs):
        if not getattr(trainer, "use_critic", False):
            _log_once("this run has no critic (e.g. GRPO)")
            return wrapped(*args, **kwargs)
        batch = overlap._batch(args, kwargs)
        step: _PrepStep | None = vars(trainer).get(_STEP_ATTR)
        if step is None or not adapter.same_batch(step.batch, batch):
            if step is not None:
                step.aborted = True  # a step that never reached values: never joined
            step = _new_step(trainer, adapter, batch, args, kwargs)
            setattr(trainer, _STEP_ATTR, step)
        started = time.monotonic()
        step.actor.start = step.actor.start or started
        try:
            step.raise_if_values_failed()  # fail fast, before more work on the actor's pool
            result = wrapped(*args, **kwargs)
        except PrepFailedError:
            vars(trainer).pop(_STEP_ATTR, None)
            raise
        except Exception as exc:
            step.aborted = True
            vars(trainer).pop(_STEP_ATTR, None)
            if step.overlapped:
                raise step.failure("actor", wrapped.__name__.removeprefix("_compute_"), exc) from exc
            raise
        step.actor.end = time.monotonic()
        step.actor_busy_s += step.actor.end - started
        return result

    return _wrap_actor_compute


def make_values_wrapper(adapter: Any) -> Callable[..., Any]:
    """For ``_compute_values``: join the values launched at old_log_prob, or run them here, timed."""

    def _wrap_compute_values(wrapped, trainer, args, kwargs):
        if getattr(_controller, "active", False):
            return wrapped(*args, **kwargs)  # the launched call itself
        step: _PrepStep | None = vars(trainer).pop(_STEP_ATTR, None)
        batch = overlap._batch(args, kwargs)
        if step is not None and step.overlapped:
            if not adapter.same_batch(step.batch, batch):
                step.aborted = True
                raise RuntimeError(
                    "verl-split: _compute_values was called with another batch than the values it started; "
                    "please report this with your verl version and trainer."
                )
            result = adapter.values_result(step, step.join_values(), args, kwargs)
        else:
            if step is None:  # no actor-side call this step (bypass mode without ref)
                actor_pool, critic_pool = adapter.pools(trainer)
                step = _PrepStep(trainer, adapter, actor_pool, critic_pool, batch)
            step.critic.start = time.monotonic()
            result = wrapped(*args, **kwargs)
            step.critic.end = time.monotonic()
        step.finish()
        return result

    return _wrap_compute_values
