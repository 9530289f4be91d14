"""Longest-predicted-first admission: the order in which the balancer hands queued requests their slots.

A step's generation ends no earlier than its longest request's own time (``floor.py``), counted from when that
request starts. Started last, it ends last, alone on its server; started first, its time overlaps the rest of the
step's work. So the queue hands slots to the requests predicted longest first (Seer's context-aware scheduling,
arXiv 2511.14617; RhymeRL's history, arXiv 2508.18588):

* a request's length is predicted from the same prompt's at its last epoch, or, with ``rollout.n > 1``, from the
  first of its siblings (same prompt, same step) that finished: the latest such figure wins. verl's clients report
  no lengths, so a length is the seconds the request held its server (the balancer's ledger, ``floor.py``): a
  proxy, good for an order (a response twice as long holds its server about twice as long at a similar batch);
* a request with no prediction ranks at the mean of the predictions known (it might be anything), so in the first
  epoch, before any sibling ends, the order is arrival order: verl's.

Order only: the same requests, with the same prompts, weights and sampling, are generated in full; which server
and when is all that changes, as with verl's own routing. ``VERL_SPLIT_TAIL=verl`` keeps arrival order.

What it reorders is what waits in the balancer (the late join's gate, ``balancer.py``): the requests that found a
slot on arrival start in arrival order, as verl sends them. A prompt is known by its tokens, which verl 0.9.1's
clients send with each acquire when the balancer asks for them (``require_acquire_fields``); and a request's end
by its id, sent with its release (``require_release_fields``). verl 0.9.0's clients send neither: under them the
order stays arrival order and no floor is kept.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from verl_split.core.settings import TAIL_ORDERS

#: ``VERL_SPLIT_TAIL``'s values: the predicted longest first, or verl's arrival order.
ORDERS = TAIL_ORDERS
LONGEST_FIRST, VERL_ORDER = TAIL_ORDERS


class LengthPredictor:
    """Per prompt key the latest response length seen: a finished sibling's this step, or the last epoch's."""

    def __init__(self) -> None:
        self._latest: dict[Any, int] = {}
        self._total = 0

    def __len__(self) -> int:
        return len(self._latest)

    def finished(self, key: Any, tokens: int) -> None:
        self._total += tokens - self._latest.get(key, 0)
        self._latest[key] = tokens

    def predict(self, key: Any) -> float | None:
        if key is None:
            return None
        return self._latest.get(key)

    def unknown(self) -> float:
        """What a request with no prediction ranks at: the mean known length (0 with none known)."""
        return self._total / len(self._latest) if self._latest else 0.0


class AdmissionQueue:
    """Requests waiting for a slot: the predicted longest first, ties in arrival order (module docstring).

    A heap of mutable entries; a request whose prediction changes while it waits (its first sibling ended) is
    pushed again and its old entry marked dead, so each change costs ``O(log n)``."""

    def __init__(self, order: str = LONGEST_FIRST, predictor: LengthPredictor | None = None) -> None:
        if order not in ORDERS:
            raise ValueError(f"admission order {order!r} is not one of {', '.join(ORDERS)}")
        self.order = order
        self.predictor = predictor or LengthPredictor()
        self._heap: list[list[Any]] = []
        self._arrival = itertools.count()
        #: Per prompt key its waiting entries (to re-rank them when a sibling ends).
        self._by_key: dict[Any, list[list[Any]]] = {}
        self._alive = 0

    def __len__(self) -> int:
        return self._alive

    def __bool__(self) -> bool:
        return self._alive > 0

    def _rank(self, key: Any) -> float:
        if self.order == VERL_ORDER:
            return 0.0
        predicted = self.predictor.predict(key)
        return -(self.predictor.unknown() if predicted is None else predicted)

    def append(self, request_id: str, waiter: Any, key: Any = None) -> None:
        entry = [self._rank(key), next(self._arrival), request_id, waiter, key, True]
        heapq.heappush(self._heap, entry)
        self._alive += 1
        if key is not None and self.order == LONGEST_FIRST:
            self._by_key.setdefault(key, []).append(entry)

    def peek(self) -> tuple[str, Any]:
        self._drop_dead()
        entry = self._heap[0]
        return entry[2], entry[3]

    def popleft(self) -> tuple[str, Any]:
        self._drop_dead()
        entry = heapq.heappop(self._heap)
        entry[5] = False
        self._alive -= 1
        self._forget(entry)
        return entry[2], entry[3]

    def finished(self, key: Any, tokens: int) -> None:
        """A request of prompt ``key`` ended with ``tokens``: learn it, and re-rank its waiting siblings."""
        if key is None:
            return
        self.predictor.finished(key, tokens)
        waiting = self._by_key.get(key, [])
        for i, entry in enumerate(waiting):
            entry[5] = False
            waiting[i] = fresh = [self._rank(key), entry[1], entry[2], entry[3], key, True]
            heapq.heappush(self._heap, fresh)

    def order_of(self) -> list[str]:
        """The waiting request ids in the order they would get slots (tests and the benchmark)."""
        return [e[2] for e in sorted(e for e in self._heap if e[5])]

    def _drop_dead(self) -> None:
        while self._heap and not self._heap[0][5]:
            heapq.heappop(self._heap)
        if not self._heap:
            raise IndexError("no request is waiting")

    def _forget(self, entry: list[Any]) -> None:
        siblings = self._by_key.get(entry[4])
        if siblings is not None:
            siblings[:] = [e for e in siblings if e is not entry]
            if not siblings:
                del self._by_key[entry[4]]
