"""Which rollout servers died, from Ray's own record of their actors, never from how fast they answer.

A reply to an ordinary actor call is no sign of life or death: Ray's built-in ``__ray_ready__`` takes a slot in
the server actor's default concurrency group and queues behind the ``generate`` calls already there. verl sizes
that group at ``max(1000, max_num_seqs + 16)`` (``RolloutReplica.max_concurrency``) and its routing has no cap per
server, so a healthy server with more requests in flight than slots, or one whose event loop is busy loading
weights, answers late. Counting such a server dead stopped healthy runs.

So a server is dead when Ray's actor table (the GCS's record, which the dashboard's state API reads too, but
which needs no dashboard) says ``DEAD``; any other state (``ALIVE``, ``RESTARTING``, ``PENDING_CREATION``) is alive.
Only where that table cannot be read for a server (a Ray whose private API moved, a handle without an id) is the
server sent one ``__ray_ready__``, and then it is dead only if Ray answers that its actor died
(``ActorDiedError``, or another ``RayActorError`` that is not the transient ``ActorUnavailableError``). A probe
that times out is no answer yet, never death: a live server that makes no progress is the generation watchdog's to
call hung, from the balancer's count of requests ended, over ``VERL_SPLIT_ROLLOUT_WATCHDOG_S`` (``watchdog.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import ray

logger = logging.getLogger(__name__)

#: The fallback probe's one deadline for every server whose actor state could not be read: past it, a server that
#: has not answered is taken as alive and busy (the balancer's progress judges it).
PROBE_TIMEOUT_S = 10.0
DEAD = "DEAD"


def actor_state(handle: Any) -> str | None:
    """The state Ray's actor table records for ``handle``'s actor (``ALIVE``, ``DEAD``, ...); None: unreadable.

    ``ray._private.state.actors`` is private (Ray 2.x; ``ray.util.state.get_actor`` needs the dashboard, which a run
    may start without), hence this one function, and the caller's probe for any form of Ray it does not fit."""
    try:
        from ray._private import state

        info = state.actors(actor_id=handle._actor_id.hex())
    except Exception as exc:  # moved, renamed, or a handle of another kind: the caller probes instead
        logger.debug("Ray's actor table is unreadable for %r: %s", handle, exc)
        return None
    found = info.get("State") if isinstance(info, dict) else None
    return found if isinstance(found, str) else None


def died(error: BaseException) -> bool:
    """Whether a call's error says its actor died (not merely that it is unreachable for now)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    if isinstance(error, ActorDiedError):
        return True
    return isinstance(error, RayActorError) and not isinstance(error, ActorUnavailableError)


def dead_replicas(
    replicas: list[Any],
    probe_timeout_s: float = PROBE_TIMEOUT_S,
    *,
    state_of: Callable[[Any], str | None] = actor_state,
    wait: Callable[..., tuple[list[Any], list[Any]]] = ray.wait,
    get: Callable[..., Any] = ray.get,
) -> list[int]:
    """Ranks of the replicas with a server whose actor is dead (module docstring), in the order given.

    The servers whose state cannot be read are probed all at once, with one deadline for them all, so a run with
    32+ replicas waits at most one ``probe_timeout_s``, and only when the table is unreadable."""
    dead: set[int] = set()
    probes: list[tuple[int, Any]] = []
    for replica in replicas:
        for server in replica.servers:
            state = state_of(server)
            if state == DEAD:
                dead.add(replica.replica_rank)
            elif state is None:
                try:
                    probes.append((replica.replica_rank, server.__ray_ready__.remote()))
                except Exception as exc:  # a handle that cannot even send: dead only if Ray says its actor died
                    if died(exc):
                        dead.add(replica.replica_rank)
    refs = [ref for _, ref in probes]
    answered: list[Any] = []
    if refs:
        answered, _ = wait(refs, num_returns=len(refs), timeout=probe_timeout_s)
    ready = set(answered)
    for rank, ref in probes:
        if rank in dead or ref not in ready:  # no answer yet: alive as far as anyone knows
            continue
        try:
            get(ref, timeout=0)
        except Exception as exc:
            if died(exc):
                dead.add(rank)
    return [replica.replica_rank for replica in replicas if replica.replica_rank in dead]
