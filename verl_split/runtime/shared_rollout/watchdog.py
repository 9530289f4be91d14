"""A rollout server that dies or hangs mid-generation ends a shared-rollout run, named, within a limit.

verl has no health checks for rollout servers, and neither trainer ends a generation that meets a dead or hung one
the way a user can act on:

* ``RayPPOTrainer`` waits in ``AgentLoopManager.generate_sequences``, whose workers gather their samples without
  ``return_exceptions`` (``AgentLoopWorker.generate_sequences`` in ``verl/experimental/agent_loop/agent_loop.py``):
  the first request to a dead server ends the step with Ray's own error, which does not name the replica;
* the v1 trainer waits in ``ReplayBuffer.sample`` (``verl/trainer/ppo/v1/replay_buffer.py``), which counts a
  prompt whose request failed as done (a ``failure`` group, sampleable, its missing samples padded downstream;
  ``trainer.v1.sampler.sync_refill_failed_groups``, off by default, would replace it with fresh prompts): the wait
  ends on the servers left and the step goes on without what the dead one lost, the error only in the agent
  loop's log. Meanwhile requests keep going to the dead server: verl's least-loaded choice favours one whose
  requests fail at once (the control-plane benchmark's fault run sent it 1,014 of a step's requests);
* and a server that hangs holds its requests, and either trainer's wait, with no limit.

So on a shared-rollout run the trainer's wait for generation runs on a thread of its own while the trainer's
thread watches (:class:`Watch`): every ``PROBE_S`` it sends every rollout server, on both pools, a no-op, with one
deadline for all (``both_pools.dead_replicas``), and asks the balancer which servers hold requests and have ended
none for ``VERL_SPLIT_ROLLOUT_WATCHDOG_S`` (``balancer.stalled``). A server found dead or hung is parked in the
balancer (``park_dead``: nothing more is routed to it), and the run stops with ``SharedRolloutError`` naming its
replica and pool: a dead server within ``PROBE_S`` plus the probe's deadline, a hung one within the watchdog's
limit plus ``PROBE_S``; and once more when the wait ends (the v1 trainer's generation can end on the servers left
before a probe came round). A failure of the wait itself is named the same way when a server is found dead; any
other is verl's, raised as it came. Nothing is saved after generation fails, so the last checkpoint is the one
before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a run has shared rollout on: the wrappers below load in every run (hooks.py)
    from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError

#: How often the trainer's thread looks at the servers while it waits for generation.
PROBE_S = 5.0
#: The probe's one deadline for every server's answer: a server whose process died answers at once, with an error.
PROBE_TIMEOUT_S = 10.0

_watch: Watch | None = None


def watch(manager: Any, limit_s: float | None = None) -> Watch:
    """Watch the generation of the trainer whose checkpoint manager is ``manager`` (a
    ``BothPoolsCheckpointManager``), in this process; ``limit_s``: the hung server's limit (the settings')."""
    from verl_split.runtime.placement.nodes import announce

    global _watch
    if limit_s is None:
        from verl_split.core import settings

        limit_s = settings.current().rollout_watchdog_s
    _watch = Watch(manager, limit_s)
    limit = f"{limit_s:g} s (VERL_SPLIT_ROLLOUT_WATCHDOG_S)" if limit_s else "none (VERL_SPLIT_ROLLOUT_WATCHDOG_S=0)"
    announce(
        f"shared rollout: generation watched every {PROBE_S:g} s: a rollout server found dead, or holding requests "
        f"and ending none for {limit}, stops the run naming its replica"
    )
    return _watch


def forget() -> None:
    """Watch nothing (tests)."""
    global _watch
    _watch = None


class Watch:
    """One trainer's rollout servers and balancer, looked at while the trainer waits for generation."""

    def __init__(
        self, manager: Any, limit_s: float, probe_s: float = PROBE_S, probe_timeout_s: float = PROBE_TIMEOUT_S
    ):
        self.manager = manager
        self.limit_s = limit_s
        self.probe_s = probe_s
        self.probe_timeout_s = probe_timeout_s

    def _replicas(self) -> dict[int, tuple[Any, str]]:
        """Replica rank -> (replica, its pool)."""
        pools = (("actor pool", self.manager.hybrid.replicas), ("critic pool", self.manager.shared.replicas))
        return {replica.replica_rank: (replica, pool) for pool, replicas in pools for replica in replicas}

    def run(self, call: Callable[[], Any]) -> Any:
        """``call()`` (the trainer's wait for generation) on a thread of its own, looked after from this one."""
        done: concurrent.futures.Future = concurrent.futures.Future()

        def target() -> None:
            try:
                done.set_result(call())
            except BaseException as exc:  # handed to the trainer's thread
                done.set_exception(exc)

        # A daemon thread: a wait given up on (the run stops) must not keep the process from exiting.
        threading.Thread(target=target, name="verl-split-generation", daemon=True).start()
        while not concurrent.futures.wait([done], timeout=self.probe_s).done:
            found = self.check()
            if found is not None:
                raise found from None
        try:
            result = done.result()
        except Exception as exc:  # verl's own error (Ray's, for a request to a dead server): named if one died
            found = self.check(hung=False)
            if found is not None:
                raise found from exc
            raise
        # Once more at the end: the v1 trainer's wait ends on the servers left (a failed prompt counts as done), so
        # a generation can end before a probe came round; a server that died in it is found before the step goes on.
        found = self.check(hung=False)
        if found is not None:
            raise found
        return result

    def check(self, hung: bool = True) -> SharedRolloutError | None:
        """The servers found dead (and, with ``hung``, those holding requests past the limit), parked; None: none."""
        import ray

        from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError, dead_replicas

        replicas = self._replicas()
        found: dict[int, str] = {
            rank: "died (its server does not answer)"
            for rank in dead_replicas([r for r, _ in replicas.values()], self.probe_timeout_s)
        }
        balancer = self.manager._balancer
        if hung and self.limit_s and balancer is not None:
            stalled = ray.get(balancer.stalled.remote(self.limit_s))
            for rank, (replica, _) in replicas.items():
                if replica.server_address in stalled and rank not in found:
                    held, idle = stalled[replica.server_address]["in_flight"], stalled[replica.server_address]["idle_s"]
                    found[rank] = (
                        f"hangs: it has held {held:g} request(s) and ended none for {idle:.0f} s "
                        f"(VERL_SPLIT_ROLLOUT_WATCHDOG_S={self.limit_s:g})"
                    )
        if not found:
            return None
        if balancer is not None:
            ray.get(balancer.park_dead.remote([replicas[rank][0].server_address for rank in found]))
        which = "; ".join(f"replica {rank} ({replicas[rank][1]}) {why}" for rank, why in sorted(found.items()))
        parked = " It is parked: no request is routed to it any more." if balancer is not None else ""
        return SharedRolloutError(
            f"shared rollout: generation stopped: the rollout server of {which}.{parked} verl has no health checks "
            "for rollout servers and would route to it, or wait for it, without end. Look for the replica's own "
            "error above (e.g. out of memory beside the critic), then resume from the last checkpoint "
            "(trainer.resume_mode=auto), with shared rollout off if it recurs."
        )


def _watched(wrapped: Any, args: tuple, kwargs: dict) -> Any:
    current = _watch
    try:
        asyncio.get_running_loop()
        awaited = True  # called from a coroutine (verl's auto_await hands back the coroutine): the caller waits
    except RuntimeError:
        awaited = False
    if current is None or awaited:
        return wrapped(*args, **kwargs)
    return current.run(lambda: wrapped(*args, **kwargs))


def wrap_generate_sequences(wrapped, instance, args, kwargs):
    """``AgentLoopManager.generate_sequences``: ``RayPPOTrainer``'s wait for a step's (or validation's) generation."""
    return _watched(wrapped, args, kwargs)


def wrap_sample(wrapped, instance, args, kwargs):
    """``ReplayBuffer.sample``: the v1 trainer's wait for a step's (or validation's) generation."""
    return _watched(wrapped, args, kwargs)
