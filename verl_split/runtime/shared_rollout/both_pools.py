"""The trainer's ``checkpoint_manager`` under shared rollout: verl's weight sync, on both pools' replicas.

``coordinator.attach`` puts a :class:`BothPoolsCheckpointManager` where the trainer keeps verl's manager.
Each push wakes the critic pool's replicas first (verl's colocated replicas sleep at level 1 and a wake-up
restores the weights they had, so the new weights must come after it), joins a critic update still
running on from the step (``runtime/overlap/deferral.py``: the two never share the critic's GPUs), then
runs verl's own sync for the hybrid replicas. A replica that fails stops the run, named.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray

from verl_split.core import metric_names as names
from verl_split.core.errors import VerlSplitError

SHARE_METRIC = names.CRITIC_POOL_ROLLOUT_SHARE
SYNC_METRIC = names.SHARED_ROLLOUT_SYNC_S


class SharedRolloutError(VerlSplitError):
    """A rollout replica on the critic pool failed."""


class BothPoolsCheckpointManager:
    """The trainer's ``checkpoint_manager`` with replicas on both pools.

    ``hybrid``: verl's manager for the actor pool's replicas (in-process ``naive`` sync);
    ``shared``: a second verl manager for the critic pool's replicas (a real transfer engine).
    Every call the trainer makes goes to both; anything else reads from ``hybrid``.
    """

    def __init__(self, trainer: Any, hybrid: Any, shared: Any, balancer: Any | None) -> None:
        self._trainer = trainer
        self.hybrid = hybrid
        self.shared = shared
        self._balancer = balancer
        self._shared_servers = {r.server_address for r in shared.replicas}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hybrid, name)

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
            dead = dead_replicas(self.shared.replicas)
            which = f"replica(s) {dead} died" if dead else "a replica failed"
            raise SharedRolloutError(
                f"shared rollout: {what} on the critic pool's rollout replicas: {which} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). verl has no health checks "
                "for rollout servers, so the run stops here instead of routing requests to a dead one. Look for the "
                "replica's own error above (e.g. out of memory beside the critic), then resume from the last "
                "checkpoint, with shared rollout off if it recurs."
            ) from exc

    def update_weights(self, global_steps: int | None = None) -> Any:
        from verl_split.runtime.overlap import deferral

        # The critic pool's replicas wake beside the critic: a critic update still running on from the
        # step (VERL_SPLIT_OVERLAP defer_critic) finishes first, so the two never share its GPUs.
        deferral.join("the weight push to the critic pool's rollout replicas")
        started = time.perf_counter()
        # Wake first: verl's colocated replicas sleep at level 1 and a wake-up restores the weights they had
        # (verl/workers/rollout/vllm_rollout/vllm_async_server.py sleep/wake_up), so the new weights must come
        # after it. Nothing else wakes them: verl's naive sync wakes only the hybrid replicas, in the actor.
        self._on_shared("waking up for the weight push", self.shared.wake_up_replicas)
        self._on_shared(f"pushing the actor's weights of step {global_steps}", self.shared.update_weights, global_steps)
        self._pending({SYNC_METRIC: time.perf_counter() - started})
        return self.hybrid.update_weights(global_steps)

    def take_routed(self) -> dict[str, int]:
        """Requests routed per server since the last call (empty under a custom router)."""
        return ray.get(self._balancer.take_routed.remote()) if self._balancer is not None else {}

    def sleep_replicas(self) -> None:
        self.hybrid.sleep_replicas()
        # After generation (PPOTrainerSync.on_sample_end): a replica that died while generating shows here.
        self._on_shared("putting to sleep after generation", self.shared.sleep_replicas)
        routed = self.take_routed()
        total = sum(routed.values())
        if total:
            on_critic_pool = sum(n for server, n in routed.items() if server in self._shared_servers)
            self._pending({SHARE_METRIC: on_critic_pool / total})

    def wake_up_replicas(self) -> None:
        self.hybrid.wake_up_replicas()
        self._on_shared("waking up", self.shared.wake_up_replicas)

    def abort_replicas(self, *args: Any, **kwargs: Any) -> None:
        # Passed on as given: 0.9.1 takes reject_request (checkpoint_engine/base.py:477), 0.9.0 and
        # main@1dda039 take nothing (base.py:458). Only verl's async trainers call it.
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


def dead_replicas(
    replicas: list[Any],
    timeout_s: float = 10.0,
    *,
    wait: Callable[..., tuple[list[Any], list[Any]]] = ray.wait,
    get: Callable[..., Any] = ray.get,
) -> list[int]:
    """Ranks of the replicas with a server that does not answer within ``timeout_s``, all probed at once.

    One probe per server, every probe sent before any is waited for, and one deadline for them all: a
    run with 32+ replicas learns which died in one timeout, not one timeout per replica. A server whose
    actor died answers at once, with an error; one that hangs is the one the deadline catches.
    """
    probes: list[tuple[int, Any]] = []
    dead: set[int] = set()
    for replica in replicas:
        try:
            probes.extend((replica.replica_rank, server.__ray_ready__.remote()) for server in replica.servers)
        except Exception:  # a handle that cannot even send
            dead.add(replica.replica_rank)
    refs = [ref for _, ref in probes]
    answered: list[Any] = []
    if refs:
        answered, _ = wait(refs, num_returns=len(refs), timeout=timeout_s)
    ready = set(answered)
    for rank, ref in probes:
        if rank in dead:
            continue
        if ref not in ready:
            dead.add(rank)
            continue
        try:
            get(ref, timeout=0)
        except Exception:
            dead.add(rank)
    return [replica.replica_rank for replica in replicas if replica.replica_rank in dead]
