"""Worker-group methods registered ``blocking=DEFERRED`` still block for ordinary callers.

Target: ``verl/single_controller/ray/base.py`` ``func_generator``, which every
``RayWorkerGroup`` calls (through the module global, in ``_bind_worker_method``) to build its
methods from the ``register`` attributes. Methods with any other ``blocking`` value are built
exactly as verl builds them. See :mod:`verl_split.legacy`.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping
from verl_split._args import get_argument

#: ``func_generator(self, method_name, dispatch_fn, collect_fn, execute_fn, blocking)``: position of ``blocking``.
_BLOCKING = 5


def _wrap_func_generator(wrapped, instance, args, kwargs):
    from verl_split import legacy

    method = wrapped(*args, **kwargs)
    blocking = get_argument(args, kwargs, _BLOCKING, "blocking", None)
    return legacy.MaterialisedUnlessDeferred(method) if legacy.is_deferred(blocking) else method


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "func_generator", _wrap_func_generator)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "func_generator")
