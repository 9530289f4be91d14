"""The trainer's ``checkpoint_manager`` under shared rollout: verl's weight sync, on both pools' replicas.

``coordinator.attach`` puts a :class:`BothPoolsCheckpointManager` where the trainer keeps verl's manager.
Each push wakes the critic pool's replicas first (verl's colocated replicas sleep at level 1 and a wake-up
restores the weights they had, so the new weights must come after it), then runs verl's own sync for the
hybrid replicas. The critic pool's replicas never wake beside a critic update: with the deferred critic
update still running at the sync (``runtime/overlap/deferral.py``), the actor pool starts generating at
once and the critic pool joins when the update is done (``late_join.py``). A replica that fails stops the
run, named.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import ray

from verl_split.core import metric_names as names
from verl_split.core import settings
from verl_split.core.errors import VerlSplitError
from verl_split.runtime.shared_rollout.balancer import caps_for_late_join
from verl_split.runtime.shared_rollout.floor import advice, floor_from_metrics
from verl_split.runtime.shared_rollout.late_join import (
    JoinForecast,
    JoinRecord,
    LateJoin,
    every_rank_done,
    join_pays,
)
from verl_split.runtime.shared_rollout.liveness import dead_replicas

SHARE_METRIC = names.CRITIC_POOL_ROLLOUT_SHARE
SYNC_METRIC = names.SHARED_ROLLOUT_SYNC_S
#: The least of an even share the actor-pool servers leave queued for a late critic pool: a step where
#: the critic pool came too late to take anything still leaves it a quarter of its share to find out.
MIN_REACH = 0.25
#: The most any call to the balancer actor may take (it answers in milliseconds; a busy one in seconds): a
#: balancer that stopped answering stops the run with Ray's timeout instead of hanging it.
BALANCER_TIMEOUT_S = 600.0


class SharedRolloutError(VerlSplitError):
    """A rollout replica on the critic pool failed."""


class BothPoolsCheckpointManager:
    """The trainer's ``checkpoint_manager`` with replicas on both pools.

    ``hybrid``: verl's manager for the actor pool's replicas (in-process ``naive`` sync);
    ``shared``: a second verl manager for the critic pool's replicas (a real transfer engine).
    Every call the trainer makes goes to both; anything else reads from ``hybrid``.
    """

    def __init__(
        self,
        trainer: Any,
        hybrid: Any,
        shared: Any,
        balancer: Any | None,
        requests_per_step: int = 0,
        server_concurrency: int | None = None,
        late_join: bool = True,
        ask_rate_model: bool = True,
    ) -> None:
        self._trainer = trainer
        self.hybrid = hybrid
        self.shared = shared
        self._balancer = balancer
        self._shared_servers = {r.server_address for r in shared.replicas}
        self._hybrid_servers = [r.server_address for r in hybrid.replicas]
        #: Requests of a step's generation (train batch x rollout.n): what the late join's caps divide.
        self._requests = requests_per_step
        self._concurrency = server_concurrency  # requests one rollout server runs at once (caps_for_late_join)
        #: How much of an even share the critic pool took in the last late-joined step (caps_for_late_join).
        self._reach = 1.0
        #: With a critic update still running at the sync: the critic pool joins late (True), or sits the
        #: step's generation out (False: ``VERL_SPLIT_LATE_JOIN``, off on GPUs until it has run there).
        self._late_join = late_join
        #: The late join asks the rate model whether a join pays (False: it joins whenever the critic's update ends
        #: before generation does: a forced decision, for a harness; ``VERL_SPLIT_LATE_JOIN=always`` forces it for a
        #: run). A join that does not pay then lengthens the step by its push.
        self._ask_rate_model = ask_rate_model
        self._late: LateJoin | None = None
        self._shared_awake = False
        #: The rate model's cost of a join: the last wake-up and push measured, except the run's first. The first
        #: is cold (the transfer's first set-up and the replicas' first wake-up: 1.3 s in a CPU run whose later
        #: pushes took 0.11 s) and no estimate of the next; until a second push there is none (join_pays).
        self._push_s: float | None = None
        self._pushes = 0
        #: A validation pass is generating (``validating``): the late join's rate model is not asked meanwhile.
        self._validating = False
        #: The last generation's late join (None: the step had none) and the balancer's account of it
        #: (``take_step``), once the generation ended: what the step's metrics and the benchmark read.
        self.last_join: JoinRecord | None = None
        self.last_account: dict[str, Any] = {}
        #: A push made at a weight sync, logged with the step that generates with those weights (at its
        #: sleep_replicas), as a late join's push is: each step's record has the push of its own weights.
        self._push_to_log: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hybrid, name)

    @property
    def push_estimate_s(self) -> float | None:
        """The wake-up and push the late join's rate model weighs a join against: the last measured, the run's
        first (cold) left out; None until a second push."""
        return self._push_s

    @contextlib.contextmanager
    def validating(self) -> Iterator[None]:
        """Around a validation pass (``hooks.wrap_validate``): a late join decided meanwhile does not ask the rate
        model (the requests it would count are validation's, and the step's generation is all ahead), and the
        pass's requests are dropped from the step's count at its end (``take_routed``)."""
        self._validating = True
        try:
            yield
        finally:
            self._validating = False
            self.take_routed()

    @property
    def replicas(self) -> list[Any]:
        return [*self.hybrid.replicas, *self.shared.replicas]

    def _pending(self, metrics: dict[str, float]) -> None:
        # Merged into the step's metrics right after on_step_end (trainer_base.py _consume_sync_metrics).
        pending = getattr(self._trainer, "_pending_sync_metrics", None) or {}
        self._trainer._pending_sync_metrics = {**pending, **metrics}

    def _on_shared(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a call on the critic pool's replicas; a failure stops the run naming them."""
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            raise self._failure(what, exc) from exc

    def _failure(self, what: str, exc: BaseException) -> SharedRolloutError:
        if isinstance(exc, SharedRolloutError):  # named already (a late join's, raised again on the trainer's thread)
            return exc
        dead = dead_replicas(self.shared.replicas)
        which = f"replica(s) {dead} died" if dead else "a replica failed"
        return SharedRolloutError(
            f"shared rollout: {what} on the critic pool's rollout replicas: {which} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). verl has no health checks "
            "for rollout servers, so the run stops here instead of routing requests to a dead one. Look for the "
            "replica's own error above (e.g. out of memory beside the critic), then resume from the last "
            "checkpoint, with shared rollout off if it recurs."
        )

    def update_weights(self, global_steps: int | None = None) -> Any:
        from verl_split.runtime.overlap import deferral

        if self._late is not None:  # a sync with no generation since the last one's late join
            self._finish_late()
            self._sleep_shared()
        critic_update = deferral.running_update()
        if critic_update is not None and self._balancer is not None and self._requests > 0:
            if self._late_join:
                return self._sync_then_join_late(critic_update, global_steps)
            return self._sync_and_sit_out(global_steps)
        # The critic pool's replicas wake beside the critic: a critic update still running on from the
        # step (VERL_SPLIT_OVERLAP defer_critic) finishes first, so the two never share its GPUs.
        deferral.join("the weight push to the critic pool's rollout replicas")
        started = time.perf_counter()
        self._wake_and_push(global_steps)
        if self._balancer is not None:
            ray.get(self._balancer.ungate.remote(), timeout=BALANCER_TIMEOUT_S)
        self._push_to_log = time.perf_counter() - started
        self._measured_push(self._push_to_log)
        return self.hybrid.update_weights(global_steps)

    def _critic_workers(self) -> list[Any]:
        return list(getattr(getattr(self._trainer, "critic_wg", None), "workers", None) or [])

    def _wake_and_push(self, global_steps: int | None) -> None:
        # Every critic rank first, not only the ones verl collects from: vLLM must not wake on a GPU whose
        # critic rank still steps or offloads (late_join.every_rank_done).
        every_rank_done(self._critic_workers())
        # Wake first: verl's colocated replicas sleep at level 1 and a wake-up restores the weights they had
        # (verl/workers/rollout/vllm_rollout/vllm_async_server.py sleep/wake_up), so the new weights must come
        # after it. Nothing else wakes them: verl's naive sync wakes only the hybrid replicas, in the actor.
        self._shared_awake = True
        self._on_shared("waking up for the weight push", self.shared.wake_up_replicas)
        self._on_shared(f"pushing the actor's weights of step {global_steps}", self.shared.update_weights, global_steps)

    def _sync_and_sit_out(self, global_steps: int | None) -> Any:
        """The critic's update runs on: the actor pool generates this step alone, the critic pool sleeps on."""
        ray.get(self._balancer.gate.remote(parked=sorted(self._shared_servers), caps={}), timeout=BALANCER_TIMEOUT_S)
        return self.hybrid.update_weights(global_steps)

    def _sync_then_join_late(self, critic_update: Any, global_steps: int | None) -> Any:
        """The actor pool generates at once; the critic pool joins when the critic's update is done, if it pays."""
        shared = sorted(self._shared_servers)
        caps = caps_for_late_join(self._requests, self._hybrid_servers, shared, self._reach, self._concurrency)
        ray.get(self._balancer.gate.remote(parked=shared, caps=caps), timeout=BALANCER_TIMEOUT_S)

        def push() -> None:
            self._wake_and_push(global_steps)

        def open_servers() -> None:
            ray.get(self._balancer.open.remote(shared), timeout=BALANCER_TIMEOUT_S)

        def forecast() -> JoinForecast:
            if self._validating:
                return JoinForecast(
                    True, self._requests, None, None, 0.0, "a validation pass generates: the step's generation is ahead"
                )
            if (at_floor := sit_out_at_floor(self.last_account.get("floor"), self._requests)) is not None:
                return at_floor
            progress = ray.get(self._balancer.progress.remote(), timeout=BALANCER_TIMEOUT_S)
            return join_pays(self._requests, progress, len(self._hybrid_servers), len(shared), self._push_s)

        def skip() -> None:  # the caps held requests back for a critic pool that will not come; it stays parked
            ray.get(self._balancer.lift_caps.remote(), timeout=BALANCER_TIMEOUT_S)

        result = self.hybrid.update_weights(global_steps)
        self._late = LateJoin(
            critic_update,
            push,
            open_servers,
            global_steps,
            ranks_done=lambda: every_rank_done(self._critic_workers()),
            # VERL_SPLIT_LATE_JOIN=always forces the decision for a run, as ask_rate_model=False does for a harness.
            forecast=forecast if self._ask_rate_model and not settings.current().late_join_always else None,
            skip=skip,
        )
        self._late.start()
        return result

    def _finish_late(self) -> tuple[LateJoin | None, bool]:
        """End this step's late join, if any: (the join, whether the critic pool joined)."""
        late, self._late = self._late, None
        try:
            joined = late.finish() if late is not None else self._shared_awake
        except Exception as exc:
            raise self._failure(f"joining the generation after step {late.global_steps} late", exc) from exc
        if late is not None and late.push_s is not None:
            self._measured_push(late.push_s)
        return late, joined

    def _measured_push(self, seconds: float) -> None:
        self._pushes += 1
        if self._pushes > 1:  # the first is cold (see __init__)
            self._push_s = seconds

    def _sleep_shared(self) -> None:
        if self._shared_awake:  # after generation (PPOTrainerSync.on_sample_end): a replica that died shows here
            self._on_shared("putting to sleep after generation", self.shared.sleep_replicas)
            self._shared_awake = False

    def take_step(self) -> dict[str, Any]:
        """The balancer's account of the step (empty under a custom router): ``balancer.take_step``."""
        return (
            ray.get(self._balancer.take_step.remote(), timeout=BALANCER_TIMEOUT_S) if self._balancer is not None else {}
        )

    def take_routed(self) -> dict[str, int]:
        """Requests routed per server since the last call, forgotten (a validation pass's); the step's join
        time is kept (``balancer.take_routed``). Empty under a custom router."""
        return (
            ray.get(self._balancer.take_routed.remote(), timeout=BALANCER_TIMEOUT_S)
            if self._balancer is not None
            else {}
        )

    def sleep_replicas(self) -> None:
        late, joined = self._finish_late()
        self.hybrid.sleep_replicas()
        self._sleep_shared()
        self.last_join = None if late is None else late.record()
        self.last_account = self.take_step()
        metrics = self._step_metrics(self.last_account, late, joined)
        if self._push_to_log is not None:  # pushed at the sync before this generation (a late join's: in metrics)
            metrics.setdefault(SYNC_METRIC, self._push_to_log)
            self._push_to_log = None
        self._pending(metrics)

    def _step_metrics(self, step: dict[str, Any], late: LateJoin | None, joined: bool) -> dict[str, float]:
        routed = step.get("routed", {})
        total = sum(routed.values())
        if not total:
            return {}
        on_critic_pool = sum(n for server, n in routed.items() if server in self._shared_servers)
        metrics = {SHARE_METRIC: on_critic_pool / total, names.CRITIC_POOL_JOINED: float(joined)}
        generation_s = step.get("generation_s")
        if joined:  # opened with the weight sync (no late join): there from the step's first request
            opened = step.get("opened_after_s") if late is not None else 0.0
            if opened is not None:
                metrics[names.CRITIC_POOL_JOIN_S] = opened
        if generation_s and total > on_critic_pool:
            # An estimate, named so: what the actor pool alone would have needed for the critic pool's requests too,
            # at the rate it kept. Exact for the CPU rollout's one-at-a-time servers; a batching server (vLLM) runs
            # more requests at once for little more time, so there it overstates the saving.
            metrics[names.SHARED_ROLLOUT_SAVED_ESTIMATE_S] = generation_s * on_critic_pool / (total - on_critic_pool)
        # The step's floor (floor.py), when verl's clients told the balancer each request's end (verl 0.9.1).
        metrics |= step.get("floor") or {}
        if late is not None:
            if late.push_s is not None:
                metrics[SYNC_METRIC] = late.push_s
            if late.finish_wait_s:
                metrics[names.CRITIC_POOL_JOIN_WAIT_S] = late.finish_wait_s
            even = len(self._shared_servers) / max(len(self._shared_servers) + len(self._hybrid_servers), 1)
            self._reach = min(1.0, max(MIN_REACH, (on_critic_pool / total) / even))
        return metrics

    def wake_up_replicas(self) -> None:
        self.hybrid.wake_up_replicas()
        self._shared_awake = True
        self._on_shared("waking up", self.shared.wake_up_replicas)

    def abort_replicas(self, *args: Any, **kwargs: Any) -> None:
        # Passed on as given: 0.9.1 takes reject_request (CheckpointEngineManager.abort_replicas in
        # checkpoint_engine/base.py), 0.9.0 and main@1dda039 take nothing. Only verl's async trainers call it.
        self.hybrid.abort_replicas(*args, **kwargs)
        self._on_shared("aborting requests", self.shared.abort_replicas, *args, **kwargs)

    def resume_generation_replicas(self) -> None:
        self.hybrid.resume_generation_replicas()
        self._on_shared("resuming generation", self.shared.resume_generation_replicas)

    def release_kv_cache_replicas(self) -> None:
        self.hybrid.release_kv_cache_replicas()
        self._on_shared("releasing the KV cache", self.shared.release_kv_cache_replicas)

    def resume_kv_cache_replicas(self) -> None:
        self.hybrid.resume_kv_cache_replicas()
        self._on_shared("restoring the KV cache", self.shared.resume_kv_cache_replicas)


def sit_out_at_floor(floor_metrics: dict[str, float] | None, requests: int) -> JoinForecast | None:
    """A forecast that the join does not pay when the step before sat at its tail floor with its longest request at
    a small batch (``floor.advice``: nothing shortens it, so a join would only cost its push); None otherwise, and
    without a floor (the rate model decides)."""
    floor = floor_from_metrics(floor_metrics or {})
    if floor is None or (said := advice(floor)).action != "nothing":
        return None
    return JoinForecast(False, requests, None, None, 0.0, f"the step before: {said.why}")
