"""Generation's tail in a run's log: how far each step's generation sat above its floor, and what could shorten it.

Reads the ``split/generation_*`` metrics verl-split's balancer logs with shared rollout (``runtime/shared_rollout/
floor.py``: the longest request's own time, the work over the servers' capacity, the distance to the larger, the
longest request's batch). verl's own keys do not carry them: ``timing_s/gen`` is the whole generation and
``response_length/max`` a length, not a time at a batch, so from a log without the ``split/`` keys nothing is said.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from verl_split.runtime.shared_rollout.floor import advice, floor_from_metrics


def tail_notes(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """One note over the steps that logged their floor (none when no step did)."""
    floors = [f for step in steps if (f := floor_from_metrics(dict(step))) is not None]
    if not floors:
        return []
    actions = Counter(advice(f).action for f in floors)
    action, _ = actions.most_common(1)[0]
    example = next(advice(f) for f in floors if advice(f).action == action)
    over = sum(f.over_floor for f in floors) / len(floors)
    tail_bound = sum(1 for f in floors if f.tail_bound)
    return [
        f"generation's floor: on average {100 * over:.0f} % above it over {len(floors)} steps, the longest request "
        f"bounding it in {tail_bound}; most often '{action}' ({example.why})"
    ]
