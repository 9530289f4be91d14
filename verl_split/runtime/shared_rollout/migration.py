"""Migrate on join: the longest-running requests of the busiest actor-pool servers move to the joining servers.

When the critic pool joins generation late, the requests already running on the actor pool's servers stay there,
at those servers' large batch, and the step ends with the longest of them (``floor.py``: the tail floor). Moved
onto a joining server, where the batch is small, a long request decodes faster per token (the decode curve in
``benchmarks/control_plane_server.py``: 47 ms a token at a batch of 64 against 7 ms alone, on one H100).
RLHFuse (arXiv 2409.13221) and Laminar (arXiv 2510.12633) move long-tail requests the same way.

How a move is made, with verl's own pieces:

1. the weight version on every source and target server is the same (the critic pool's push has landed): checked
   first, and a difference refuses the whole migration (:class:`MigrationRefused`) before anything is aborted,
   since a request resumed on other weights would mix two policies in one response;
2. the moves are chosen (:func:`choose_moves`): over and over, the most loaded source server gives up its
   longest-running request not yet chosen, to the target with the fewest requests;
3. each moved request is pinned to its target in the balancer (verl's sticky map: its next acquire goes there);
4. it is aborted on its source (``abort_request(request_id, reset_prefix_cache=False)``: the source's prefix cache
   stays, for the requests that stay there);
5. the client resumes it: verl's ``FullyAsyncLLMServerClient.generate`` re-sends an aborted request with its prompt
   and the tokens so far (and the budget left), acquires again (the pin sends it to the target), and concatenates
   the tokens and the rollout log-probs of both parts. It waits 1 s before each resume (verl 0.9.1's
   ``llm_server.py``): a move pays only for a request with well over a second of decoding left.

Exact in distribution (the same prompt, weights and sampling parameters; the response generated in full), not bit
for bit on vLLM: the target samples the rest with its own random numbers. What it needs that a default run lacks:
the resuming client (the sync trainer's ``LLMServerClient`` returns an aborted request as it stands: a cut
response), and the request id passed through to vLLM (``rollout.full_determinism``; otherwise verl sends a fresh
id per call and ``abort_request`` cannot name it). So it is not switched on in a training run; the control-plane
benchmark and its tests run it on stand-in servers, and the vLLM tier on verl's own vLLM servers
(``tests/on_vllm/test_vllm_migration.py``).

On verl's vLLM server (``vLLMHttpServer``) two calls differ from the stand-in's, for reasons of verl 0.9.1 and
vLLM 0.27 (:data:`VLLM_SERVER_CALLS`):

* the weight version is the server's ``global_steps`` (set by the checkpoint manager's ``set_global_steps`` after
  each push, and stamped on every response as ``extra_fields["global_steps"]``), which it has no getter for;
* verl's ``abort_request`` finds no request on vLLM 0.27: vLLM keys its requests by an internal id (the id it was
  given plus 8 random characters, ``InputProcessor.assign_request_id``) and verl looks the given id up among them,
  then calls ``OutputProcessor.abort_requests`` without the ``internal`` flag it requires. vLLM's own abort takes
  the id the request was sent with (``AsyncLLM.abort``), ends its stream with an abort (the tokens so far in it)
  and keeps the prefix cache: a move calls it on the server's actor.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl_split.core.errors import VerlSplitError


class MigrationRefused(VerlSplitError):
    """The servers hold different weight versions: moving a request between them would mix two policies."""


@dataclass(frozen=True)
class Move:
    request_id: str
    source: str
    target: str


def choose_moves(
    running: dict[str, tuple[str, float]], inflight: dict[str, int], sources: list[str], targets: list[str], count: int
) -> list[Move]:
    """Up to ``count`` moves (module docstring, step 2). ``running``: request id -> (server, when it started);
    ``inflight``: requests per server (targets included: a target already busy gets fewer)."""
    if not targets or count <= 0:
        return []
    by_server: dict[str, list[tuple[float, str]]] = {s: [] for s in sources}
    for request_id, (server, started) in running.items():
        if server in by_server:
            by_server[server].append((started, request_id))
    for queue in by_server.values():
        heapq.heapify(queue)  # the earliest started (the longest running) first
    busiest = [(-inflight.get(s, len(q)), s) for s, q in by_server.items() if q]
    heapq.heapify(busiest)
    fewest = [(inflight.get(t, 0), t) for t in targets]
    heapq.heapify(fewest)
    moves: list[Move] = []
    while busiest and len(moves) < count:
        load, source = heapq.heappop(busiest)
        _, request_id = heapq.heappop(by_server[source])
        held, target = heapq.heappop(fewest)
        moves.append(Move(request_id, source, target))
        heapq.heappush(fewest, (held + 1, target))
        if by_server[source]:
            heapq.heappush(busiest, (load + 1, source))
    return moves


def check_versions(versions: dict[str, Any]) -> None:
    """Raise :class:`MigrationRefused` unless every server named holds the same weight version."""
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{server}: {version}" for server, version in sorted(versions.items()))
        raise MigrationRefused(
            f"not moving requests between servers holding different weights ({listed}): a resumed response would "
            "mix two policies. The critic pool's push must land before its servers take moved requests."
        )


@dataclass(frozen=True)
class ServerCalls:
    """How a migration asks a rollout server's actor for its weight version and aborts one of its requests (each
    returns a Ray object ref; the abort's answer is a dict with ``aborted``)."""

    version: Callable[[Any], Any]
    abort: Callable[[Any, str], Any]


#: A server with ``weights_version`` and verl's ``abort_request`` (the control-plane benchmark's stand-in).
STAND_IN_CALLS = ServerCalls(
    version=lambda server: server.weights_version.remote(),
    abort=lambda server, request_id: server.abort_request.remote(request_id, reset_prefix_cache=False),
)


#: How long a move waits for vLLM's abort on the server's event loop: a wedged loop must not hold the actor's
#: thread for ever (the watchdog's stop gives its aborts as long).
ABORT_WAIT_S = 30.0


def _global_steps(server: Any) -> Any:
    return server.global_steps


def _abort_in_engine(server: Any, request_id: str) -> dict[str, Any]:
    """On verl's vLLM server's actor: vLLM's own abort of the request sent as ``request_id``. Ray runs this on a
    thread of the actor's, not its event loop, where vLLM's engine client lives: the abort is run there, and waited
    for. Its stream ends with the tokens so far; the engine drops the request, its prefix cache kept."""
    handler = server.engine.output_handler  # vLLM's task reading the engine's outputs, on the server's loop
    if handler is None:  # nothing has run here
        return {"aborted": False, "request_id": request_id}
    waiting = asyncio.run_coroutine_threadsafe(_abort(server.engine, request_id), handler.get_loop())
    aborted = waiting.result(ABORT_WAIT_S)
    return {"aborted": aborted, "request_id": request_id}


async def _abort(engine: Any, request_id: str) -> bool:
    if request_id not in engine.output_processor.external_req_ids:
        return False  # ended already: nothing to move
    await engine.abort(request_id)
    return True


#: verl's vLLM server (module docstring: why not its ``abort_request``); Ray's ``__ray_call__`` runs a function on
#: the actor, as verl's own replica reads its workers' devices (``vLLMReplica.launch_servers``).
VLLM_SERVER_CALLS = ServerCalls(
    version=lambda server: server.__ray_call__.remote(_global_steps),
    abort=lambda server, request_id: server.__ray_call__.remote(_abort_in_engine, request_id),
)


async def migrate(
    balancer: Any,
    servers: dict[str, Any],
    sources: list[str],
    targets: list[str],
    count: int,
    calls: ServerCalls = STAND_IN_CALLS,
):
    """Move up to ``count`` requests from ``sources`` to ``targets`` (module docstring); the moves made.

    ``balancer``: verl-split's balancer actor (``running_requests``, ``pin``); ``servers``: name -> the rollout
    server's actor, asked through ``calls`` (:data:`VLLM_SERVER_CALLS` for verl's vLLM servers)."""
    named = [*sources, *targets]
    versions = await asyncio.gather(*[calls.version(servers[s]) for s in named])
    check_versions(dict(zip(named, versions, strict=True)))
    running, inflight = await balancer.running_requests.remote()
    moves = choose_moves(running, inflight, sources, targets, count)
    if not moves:
        return []
    await balancer.pin.remote({m.request_id: m.target for m in moves})
    answers = await asyncio.gather(*[calls.abort(servers[m.source], m.request_id) for m in moves])
    # A request that ended between the choice and its abort is simply not moved: its pin is never used.
    return [m for m, answer in zip(moves, answers, strict=True) if answer.get("aborted")]
