"""Split placement for verl 0.9's legacy trainer (``trainer.use_v1=false``, ``main_ppo_v0``).

Target: ``verl/trainer/main_ppo_v0.py``. ``TaskRunner`` there is an ``@ray.remote`` ActorClass; the
plain class it wraps is ``TaskRunner.__ray_metadata__.modified_class``, a subclass Ray builds of
``TaskRunner``, which inherits ``init_resource_pool_mgr`` from ``BaseTaskRunner``. Two Ray facts
decide what to patch (Ray 2.60, ``ray/actor.py`` ``_make_actor``):

* ``_inject_tracing_into_class`` copies every method into the modified class at decoration time,
  each a closure over the function object of that moment: patching ``BaseTaskRunner`` afterwards
  would not change what the modified class calls.
* The driver cloudpickles the modified class *by value* into the TaskRunner actor; functions
  inside it are pickled by reference only while ``module.qualname`` still resolves to them.

So the seam wraps ``BaseTaskRunner.init_resource_pool_mgr`` and removes the modified class's copy
of it: the lookup then reaches ``BaseTaskRunner``, which the actor process imports by reference
and patches itself (verl loads verl-split there too). Wrapping the modified class instead would
put a wrapt proxy into the pickled class, and wrapt proxies cannot be pickled.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping
from verl_split._args import get_argument

_METHOD = "init_resource_pool_mgr"
#: id(modified class) -> the copy of the method Ray put there; kept here, not on the (pickled) class.
_saved: dict[int, object] = {}


def _wrap_init_resource_pool_mgr(wrapped, instance, args, kwargs):
    manager = wrapped(*args, **kwargs)
    from verl_split import pools
    from verl_split.placement import plan_from_config

    config = get_argument(args, kwargs, 0, "config")
    plan = plan_from_config(config)
    split = pools.split_pool_manager(plan, manager)
    pools.announce_plan(plan)
    return split


def _ray_class(module: ModuleType):
    metadata = getattr(module.TaskRunner, "__ray_metadata__", None)
    return getattr(metadata, "modified_class", None)


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.BaseTaskRunner, _METHOD, _wrap_init_resource_pool_mgr)
    ray_class = _ray_class(module)
    if ray_class is not None and _METHOD in vars(ray_class):
        _saved[id(ray_class)] = vars(ray_class)[_METHOD]
        delattr(ray_class, _METHOD)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.BaseTaskRunner, _METHOD)
    ray_class = _ray_class(module)
    if ray_class is not None and id(ray_class) in _saved:
        setattr(ray_class, _METHOD, _saved.pop(id(ray_class)))
