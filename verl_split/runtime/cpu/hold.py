"""A forced generation tail for tests (``VERL_SPLIT_CPU_HOLD_AFTER=N``): the CPU servers hold requests back.

What the streamed values (``runtime/overlap/stream_values*.py``) do depends on which samples have finished when
they look, which on a real engine is a matter of timing. A test cannot wait on timing, so it forces the tail: the
lane arms every CPU rollout server before the step's generation (``arm_all``); each server then answers its first
N requests and holds the rest; the lane values what finished and then releases the held ones (``release_all``).
So the samples valued early are exactly the first N per server, every run. Nothing is armed outside a lane's
step (validation, stock runs), so nothing there is ever held; with the setting at 0 both calls do nothing.

The server side (``HeldRequests``) lives in each ``CPUGenerationServer``; the trainer side finds the servers by
their Ray actor names (``names.py``).
"""

from __future__ import annotations

import asyncio
import logging

from verl_split.core import settings
from verl_split.runtime.cpu.names import SERVER_NAME_PREFIX

logger = logging.getLogger("verl_split.cpu_rollout")

#: A held request waits at most this long for its release: a guard against a lane that never releases (a bug),
#: so a test fails on its numbers instead of hanging. Never reached by a working lane.
RELEASE_GUARD_S = 600.0


class HeldRequests:
    """One server's gate: after ``arm(n)``, its first ``n`` requests pass, the rest wait for ``release``."""

    def __init__(self) -> None:
        self._limit: int | None = None  # None: not armed, everything passes
        self._passed = 0
        self._released = asyncio.Event()

    def arm(self, answer_first: int) -> None:
        self._limit, self._passed = answer_first, 0
        self._released.clear()

    def release(self) -> int:
        """Let every held request through; return how many passed before (the ones answered early)."""
        passed, self._limit = self._passed, None
        self._released.set()
        return passed

    async def admit(self) -> None:
        if self._limit is None:
            return
        if self._passed < self._limit:
            self._passed += 1
            return
        try:
            await asyncio.wait_for(self._released.wait(), RELEASE_GUARD_S)
        except TimeoutError:
            logger.error("a held request was never released in %.0f s (VERL_SPLIT_CPU_HOLD_AFTER)", RELEASE_GUARD_S)


def _servers() -> list:
    import ray

    names = [n for n in ray.util.list_named_actors() if n.startswith(SERVER_NAME_PREFIX)]
    return [ray.get_actor(n) for n in sorted(names)]


def server_count() -> int:
    """How many CPU rollout servers the run has (each answers its first N requests)."""
    return len(_servers())


def arm_all() -> None:
    """Before a step's generation: every CPU server answers its first N requests, then holds (N from the setting)."""
    count = settings.current().cpu_hold_after
    if count:
        import ray

        ray.get([s.hold_after.remote(count) for s in _servers()])


def release_all() -> None:
    """Release every held request (a no-op where nothing is armed)."""
    if settings.current().cpu_hold_after:
        import ray

        ray.get([s.release_held.remote() for s in _servers()])
