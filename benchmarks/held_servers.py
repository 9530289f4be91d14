"""Stand-in rollout servers whose generations are held until a gate opens, and the manager the watchdog reads.

What the rollout watchdog depends on is only a server's Ray actor: its request slots (``max_concurrency``), its
state in Ray's actor table and its ``abort_all_requests``. So a Ray async actor whose ``generate`` waits on a gate
stands in for verl's vLLM server: it is held at its slots for exactly as long as the caller says, with no clock.
Used by ``watchdog_scale.py`` and by the watchdog's Ray test (``tests/runtime/shared_rollout/test_watchdog_ray.py``).
Ray's workers import this module by name: the caller puts this folder on their ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import ray


@ray.remote(num_cpus=0)
class Gate:
    """What every held generation waits on, opened by the caller."""

    def __init__(self) -> None:
        self._open = asyncio.Event()

    async def wait(self) -> None:
        await self._open.wait()

    async def open(self) -> None:
        self._open.set()


@ray.remote(num_cpus=0)
class HeldServer:
    """A rollout server's actor as the watchdog sees it: requests in its default group, an abort it can be asked
    (verl's servers' signature), and the aborts it was asked for."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate
        self.aborts: list[bool] = []

    async def generate(self, request: int) -> int:
        await self.gate.wait.remote()
        return request

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        self.aborts.append(reject_request)

    async def aborted(self) -> list[bool]:
        return self.aborts


def start_held_servers(count: int, slots: int, waiting: int) -> tuple[Any, list[Any]]:
    """The gate (room for ``waiting`` held generations) and ``count`` servers of ``slots`` request slots, started."""
    gate = Gate.options(max_concurrency=waiting).remote()
    servers = [HeldServer.options(max_concurrency=slots).remote(gate) for _ in range(count)]
    ray.get([server.__ray_ready__.remote() for server in servers])
    return gate, servers


def by_address(servers: list[Any]) -> dict[str, Any]:
    """The servers as the balancer takes them, by address: replica ``rank``'s is ``s<rank>``."""
    return {f"s{rank}": server for rank, server in enumerate(servers)}


def watched_manager(servers: list[Any], balancer: Any, actor_pool: int) -> SimpleNamespace:
    """The checkpoint manager as the watchdog reads it: the first ``actor_pool`` replicas on the actor pool, the rest
    on the critic pool, one server each at its ``by_address`` address."""
    replicas = [
        SimpleNamespace(replica_rank=rank, server_address=address, servers=[server])
        for rank, (address, server) in enumerate(by_address(servers).items())
    ]
    return SimpleNamespace(
        hybrid=SimpleNamespace(replicas=replicas[:actor_pool]),
        shared=SimpleNamespace(replicas=replicas[actor_pool:]),
        _balancer=balancer,
    )
