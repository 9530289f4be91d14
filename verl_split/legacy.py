"""Non-blocking critic dispatch for verl 0.7's legacy workers (``verl/workers/fsdp_workers.py``).

verl 0.7's legacy ``CriticWorker.update_critic`` is registered ``blocking=True``: the worker
group's method returns only when the critic has finished, so nothing could run beside it.
Three seams change that for the one caller that can use a future, and for no one else:

* ``legacy_critic_worker``: ``CriticWorker.update_critic`` becomes a plain function (a wrapt
  proxy cannot be pickled, and Ray would not see it as a method) whose ``register``
  attributes are a *copy* of verl's with ``blocking`` set to :data:`DEFERRED`, which is
  falsy. verl keeps those attributes in one dict on the function (``MAGIC_ATTR``,
  ``verl/single_controller/base/decorator.py``), shared by every subclass and every
  colocated ``WorkerDict``: mutating it in place would change them for everyone.
* ``legacy_dispatch``: ``func_generator`` (``verl/single_controller/ray/base.py``) builds the
  worker group's method; verl's own method sees a falsy ``blocking`` and returns a future.
  For ``DEFERRED`` methods it is wrapped so that it still returns the materialised result,
  unless the caller is the trainer's ``_update_critic`` under :func:`deferred_dispatch`.
* ``overlap_legacy``: runs the stock ``_update_critic`` under :func:`deferred_dispatch` and
  ``.get()``s what it returns, so the step's critic future is joined where overlap.py
  expects it (``_CriticResult.get``), and the trainer still gets a ``DataProto``.

Standard library only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_state = threading.local()


class _Deferred:
    """``blocking`` for a method whose worker-group call returns a future only to the coordinated step."""

    def __bool__(self) -> bool:
        return False  # verl's Functor: `if blocking: output = ray.get(output)`

    def __repr__(self) -> str:
        return "verl_split.legacy.DEFERRED"

    def __reduce__(self) -> str:
        # The attributes travel with verl's colocated WorkerDict class, which Ray pickles by value.
        return "DEFERRED"


DEFERRED = _Deferred()


def is_deferred(blocking: Any) -> bool:
    return isinstance(blocking, _Deferred)


@contextlib.contextmanager
def deferred_dispatch() -> Iterator[None]:
    """Let DEFERRED worker-group methods called on this thread return their futures."""
    previous = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = previous


def dispatch_deferred() -> bool:
    return getattr(_state, "active", False)


def materialise(result: Any) -> Any:
    """``result.get()`` for a verl future (``DataProtoFuture``, or overlap.py's proxy of one)."""
    from verl import DataProto

    get = getattr(result, "get", None)
    if isinstance(result, DataProto) or not callable(get):
        return result
    return get()


class MaterialisedUnlessDeferred:
    """A worker-group method built with ``blocking=DEFERRED``: materialised for every caller
    except the trainer's ``_update_critic`` under :func:`deferred_dispatch`."""

    def __init__(self, method: Any) -> None:
        self.method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        output = self.method(*args, **kwargs)
        return output if dispatch_deferred() else materialise(output)

    def __getattr__(self, name: str) -> Any:
        if name == "method":
            raise AttributeError(name)
        return getattr(self.method, name)
