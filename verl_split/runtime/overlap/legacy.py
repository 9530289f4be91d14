"""Non-blocking critic dispatch for verl 0.7's legacy workers (``verl/workers/fsdp_workers.py``).

verl 0.7's legacy ``CriticWorker.update_critic`` is registered ``blocking=True``: the worker
group's method returns only when the critic has finished, so nothing could run beside it.
Three seams (``seams.py``) change that for the one caller that can use a future, and for no one else:

* ``legacy_critic_worker`` (:func:`defer_critic_dispatch`): ``CriticWorker.update_critic`` becomes a
  plain function (a wrapt
  proxy cannot be pickled, and Ray would not see it as a method) whose ``register``
  attributes are a *copy* of verl's with ``blocking`` set to :data:`DEFERRED`, which is
  falsy. verl keeps those attributes in one dict on the function (``MAGIC_ATTR``,
  ``verl/single_controller/base/decorator.py``), shared by every subclass and every
  colocated ``WorkerDict``: mutating it in place would change them for everyone.
* ``legacy_dispatch`` (:func:`wrap_func_generator`): ``func_generator`` (``verl/single_controller/ray/base.py``)
  builds the worker group's method; verl's own method sees a falsy ``blocking`` and returns a future.
  For ``DEFERRED`` methods it is wrapped so that it still returns the materialised result,
  unless the caller is the trainer's ``_update_critic`` under :func:`deferred_dispatch`.
* ``overlap_legacy`` (:func:`make_update_critic_wrapper`): runs the stock ``_update_critic`` under
  :func:`deferred_dispatch` and ``.get()``s what it returns, so the step's critic future is joined
  where ``updates.py`` expects it (``CriticResult.get``), and the trainer still gets a ``DataProto``.
  The engine critic's branch (``use_legacy_worker_impl=disable``) joins its own future; nothing
  changes there.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from verl_split.plugin.args import get_argument
from verl_split.plugin.seam import Undo
from verl_split.plugin.wrapping import MARK
from verl_split.runtime.overlap import lanes

_DISPATCH = "legacy_deferred_dispatch"


class _Deferred:
    """``blocking`` for a method whose worker-group call returns a future only to the coordinated step."""

    def __bool__(self) -> bool:
        return False  # verl's Functor: `if blocking: output = ray.get(output)`

    def __repr__(self) -> str:
        return "verl_split.runtime.overlap.legacy.DEFERRED"

    def __reduce__(self) -> str:
        # The attributes travel with verl's colocated WorkerDict class, which Ray pickles by value.
        return "DEFERRED"


DEFERRED = _Deferred()


def is_deferred(blocking: Any) -> bool:
    return isinstance(blocking, _Deferred)


@contextlib.contextmanager
def deferred_dispatch() -> Iterator[None]:
    """Let DEFERRED worker-group methods called on this thread return their futures."""
    with lanes.passthrough(_DISPATCH):
        yield


def dispatch_deferred() -> bool:
    return lanes.passing_through(_DISPATCH)


def materialise(result: Any) -> Any:
    """``result.get()`` for a verl future (``DataProtoFuture``, or ``updates.py``'s proxy of one)."""
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


# -- the three seams' code (seams.py names it) -------------------------------------------------
def defer_critic_dispatch(target: ModuleType, undo: Undo) -> None:
    """``CriticWorker.update_critic`` as a plain function carrying a copy of verl's ``register`` attributes
    with ``blocking=DEFERRED``; verl's function and its attribute dict stay untouched, and come back."""
    from verl.single_controller.base.decorator import MAGIC_ATTR

    original = vars(target.CriticWorker)["update_critic"]
    if getattr(original, MARK, False):
        return

    @functools.wraps(original)
    def update_critic(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    # functools.wraps copied verl's attribute dict by reference: give this function its own.
    setattr(update_critic, MAGIC_ATTR, {**getattr(original, MAGIC_ATTR), "blocking": DEFERRED})
    setattr(update_critic, MARK, True)
    undo.setattr(target.CriticWorker, "update_critic", update_critic)


#: ``func_generator(self, method_name, dispatch_fn, collect_fn, execute_fn, blocking)``: position of ``blocking``.
_BLOCKING = 5


def wrap_func_generator(wrapped, instance, args, kwargs):
    """``func_generator`` (every ``RayWorkerGroup`` builds its methods with it, through the module global in
    ``_bind_worker_method``): a DEFERRED method still blocks for every caller but the coordinated step."""
    method = wrapped(*args, **kwargs)
    blocking = get_argument(args, kwargs, _BLOCKING, "blocking", None)
    return MaterialisedUnlessDeferred(method) if is_deferred(blocking) else method


def make_update_critic_wrapper(adapter: Any) -> Callable[..., Any]:
    """``RayPPOTrainer._update_critic`` on 0.7: the update overlap's wrapper around a stock call whose
    DEFERRED dispatch returns a future, joined before anything in ``fit`` reads it."""
    from verl_split.runtime.overlap import update_hooks

    coordinate = update_hooks.make_update_critic_wrapper(adapter)

    def _wrap_update_critic(wrapped, instance, args, kwargs):
        def stock_update_critic_joined(*a, **kw):
            with deferred_dispatch():
                result = wrapped(*a, **kw)
            return materialise(result)

        return coordinate(stock_update_critic_joined, instance, args, kwargs)

    return _wrap_update_critic
