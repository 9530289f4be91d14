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
thread watches (:class:`Watch`): every ``PROBE_S`` it reads every rollout server's actor state, on both pools, from
Ray's actor table (``liveness.dead_replicas``: dead is what Ray recorded, never a slow answer, so a server busy
with more requests than its actor has slots is not stopped), and asks the balancer which servers hold requests
and have ended none for ``VERL_SPLIT_ROLLOUT_WATCHDOG_S`` (``balancer.stalled``): the only way a live server is
called hung. A server found dead or hung is parked in the balancer (``park_dead``: nothing more is routed to it),
and the run stops with ``SharedRolloutError`` naming its replica and pool: a dead server within ``PROBE_S`` of Ray
recording its death, a hung one within the watchdog's limit plus ``PROBE_S``; and once more when the wait ends
(the v1 trainer's generation can end on the servers left before a probe came round). A failure of the wait itself
is named the same way when a server is found dead; any other is verl's, raised as it came. Nothing is saved after
generation fails, so the last checkpoint is the one before.

The watch's own calls to the balancer answer within ``BALANCER_TIMEOUT_S`` (they run in its control concurrency
group, apart from request traffic, ``balancer.py``), or the run stops with ``SharedRolloutError`` naming the
balancer: a dead or wedged balancer would otherwise hang the one component meant to end hangs.

When the watch stops a run, every live server is asked to abort its requests (``abort_all_requests``, rejecting
new ones), so that the wait given up on ends instead of generating on. vLLM's and SGLang's servers abort what they
run; verl-split's CPU server (``runtime/cpu/server.py``) cannot stop a generation already running, which finishes
on its thread. The given-up wait itself stays on its daemon thread until its requests return or fail: harmless
when the process ends, as a run does; a driver that catches the error and goes on keeps it until then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a run has shared rollout on: the wrappers below load in every run (hooks.py)
    from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError

logger = logging.getLogger(__name__)

#: How often the trainer's thread looks at the servers while it waits for generation.
PROBE_S = 5.0
#: The most the watch waits for one answer of the balancer (it answers in milliseconds, from its control group).
BALANCER_TIMEOUT_S = 60.0
#: The most the watch waits for the servers to confirm they aborted their requests, once it stops a run.
ABORT_TIMEOUT_S = 30.0

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
        f"shared rollout: generation watched every {PROBE_S:g} s: a rollout server Ray records dead, or holding "
        f"requests and ending none for {limit}, stops the run naming its replica"
    )
    return _watch


def forget() -> None:
    """Watch nothing (tests)."""
    global _watch
    _watch = None


class Watch:
    """One trainer's rollout servers and balancer, looked at while the trainer waits for generation."""

    def __init__(
        self,
        manager: Any,
        limit_s: float,
        probe_s: float = PROBE_S,
        probe_timeout_s: float | None = None,
        balancer_timeout_s: float = BALANCER_TIMEOUT_S,
        abort_timeout_s: float = ABORT_TIMEOUT_S,
    ):
        from verl_split.runtime.shared_rollout import liveness

        self.manager = manager
        self.limit_s = limit_s
        self.probe_s = probe_s
        #: The fallback probe's deadline, where Ray's actor table cannot be read (liveness.py).
        self.probe_timeout_s = liveness.PROBE_TIMEOUT_S if probe_timeout_s is None else probe_timeout_s
        self.balancer_timeout_s = balancer_timeout_s
        self.abort_timeout_s = abort_timeout_s

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
            found = self._stopping(self.check)
            if found is not None:
                raise found from None
        try:
            result = done.result()
        except Exception as exc:  # verl's own error (Ray's, for a request to a dead server): named if one died
            found = self._stopping(lambda: self.check(hung=False))
            if found is not None:
                raise found from exc
            raise
        # Once more at the end: the v1 trainer's wait ends on the servers left (a failed prompt counts as done), so
        # a generation can end before a probe came round; a server that died in it is found before the step goes on.
        found = self._stopping(lambda: self.check(hung=False))
        if found is not None:
            raise found
        return result

    def _stopping(self, check: Callable[[], SharedRolloutError | None]) -> SharedRolloutError | None:
        """``check()``; when it stops the run (a server found, or the balancer failing), the servers' requests aborted
        first."""
        from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError

        try:
            found = check()
        except SharedRolloutError as exc:  # the balancer's: the run stops all the same
            found = exc
        if found is not None:
            self.abort()
        return found

    def _ask(self, what: str, call: Callable[[], Any]) -> Any:
        """The balancer's answer to ``call()`` (a Ray ref) within ``balancer_timeout_s``; else the run stops, named."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError

        advice = (
            "Look for the balancer's own error above (an actor of class SharedRolloutBalancer), then resume from the "
            "last checkpoint (trainer.resume_mode=auto), with shared rollout off if it recurs."
        )
        try:
            return ray.get(call(), timeout=self.balancer_timeout_s)
        except GetTimeoutError:
            raise SharedRolloutError(
                f"shared rollout: generation stopped: the load balancer did not answer the generation watchdog's "
                f"{what} within {self.balancer_timeout_s:g} s: it is wedged, and every request routed through it "
                f"would wait with it. {advice}"
            ) from None
        except RayActorError as exc:
            raise SharedRolloutError(
                f"shared rollout: generation stopped: the load balancer died ({type(exc).__name__}), and every "
                f"request of the step is routed through it. {advice}"
            ) from exc

    def abort(self) -> None:
        """Ask every rollout server whose actor is alive to abort its requests and reject new ones (module
        docstring), waiting at most ``abort_timeout_s`` for their answers; what does not answer is logged."""
        import ray

        from verl_split.runtime.shared_rollout import liveness

        sent: list[tuple[int, Any]] = []
        for rank, (replica, _) in self._replicas().items():
            for server in getattr(replica, "servers", None) or []:
                if liveness.actor_state(server) == liveness.DEAD:
                    continue
                try:
                    sent.append((rank, server.abort_all_requests.remote(reject_request=True)))
                except Exception as exc:  # a server of a kind without it: its requests run on
                    logger.warning("shared rollout: replica %d's server cannot abort its requests: %s", rank, exc)
        if not sent:
            return
        answered, _ = ray.wait([ref for _, ref in sent], num_returns=len(sent), timeout=self.abort_timeout_s)
        unconfirmed = sorted({rank for rank, ref in sent if ref not in set(answered)})
        if unconfirmed:
            logger.warning(
                "shared rollout: replicas %s did not confirm within %g s that they aborted their requests; "
                "what they run goes on until it ends",
                unconfirmed,
                self.abort_timeout_s,
            )

    def check(self, hung: bool = True) -> SharedRolloutError | None:
        """The servers found dead (and, with ``hung``, those holding requests past the limit), parked; None: none."""
        from verl_split.runtime.shared_rollout import liveness
        from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError

        replicas = self._replicas()
        found: dict[int, str] = {
            rank: "died (Ray records its server's actor as dead)"
            for rank in liveness.dead_replicas([r for r, _ in replicas.values()], self.probe_timeout_s)
        }
        balancer = self.manager._balancer
        if hung and self.limit_s and balancer is not None:
            stalled = self._ask("read of stalled servers", lambda: balancer.stalled.remote(self.limit_s))
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
            addresses = [replicas[rank][0].server_address for rank in found]
            self._ask("parking of the servers found", lambda: balancer.park_dead.remote(addresses))
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
