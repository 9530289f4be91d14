"""Test-only verl plugin: slow down, fail or kill the actor and critic updates, and log them.

Loaded in every process of a run through verl's own ``VERL_USE_EXTERNAL_MODULES``
(the tests put this folder on ``PYTHONPATH``). It wraps the *worker-side* update
methods of ``verl/workers/engine_workers.py`` (0.8, 0.9) and of the legacy
``verl/workers/fsdp_workers.py`` (0.7's default workers), so the intervals it logs are
measured inside the worker processes, independently of what verl-split measures in
the trainer.

Environment:
- ``SLOW_UPDATES_LOG``: JSON-lines file: a line when an update starts (role, pid, start, and
  the Ray placement group the worker runs in)
  and one when it ends (role, pid, start, end).
- ``SLOW_UPDATES_SLEEP``: seconds to sleep at the start of each update (default 0).
- ``SLOW_UPDATES_FAIL``: ``critic`` or ``actor``: raise inside that update.
- ``SLOW_UPDATES_KILL``: ``critic`` or ``actor``: kill that worker's process mid-update.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time

import wrapt

_inside_actor_update = threading.local()


def _log(record: dict) -> None:
    path = os.environ.get("SLOW_UPDATES_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _placement_group() -> str | None:
    import ray

    return ray.get_runtime_context().get_placement_group_id()


def _instrument(role, original):
    @functools.wraps(original)  # keeps verl's `register` metadata (verl's MAGIC_ATTR)
    def update(self, *args, **kwargs):
        # ActorRolloutRefWorker.update_actor calls its own TrainingWorker.train_mini_batch:
        # that inner call belongs to the actor update, not to the critic.
        if role == "critic" and getattr(_inside_actor_update, "active", False):
            return original(self, *args, **kwargs)
        start = time.time()
        _log({"role": role, "pid": os.getpid(), "start": start, "placement_group": _placement_group()})
        time.sleep(float(os.environ.get("SLOW_UPDATES_SLEEP", "0")))
        if os.environ.get("SLOW_UPDATES_KILL") == role:
            os._exit(1)
        if os.environ.get("SLOW_UPDATES_FAIL") == role:
            raise RuntimeError(f"injected failure in the {role} update")
        _inside_actor_update.active = role == "actor"
        try:
            return original(self, *args, **kwargs)
        finally:
            _inside_actor_update.active = False
            _log({"role": role, "pid": os.getpid(), "start": start, "end": time.time()})

    return update


@wrapt.when_imported("verl.workers.engine_workers")
def _patch(module):
    module.ActorRolloutRefWorker.update_actor = _instrument("actor", module.ActorRolloutRefWorker.update_actor)
    module.TrainingWorker.train_mini_batch = _instrument("critic", module.TrainingWorker.train_mini_batch)


@wrapt.when_imported("verl.workers.fsdp_workers")
def _patch_legacy(module):
    module.ActorRolloutRefWorker.update_actor = _instrument("actor", module.ActorRolloutRefWorker.update_actor)
    module.CriticWorker.update_critic = _instrument("critic", module.CriticWorker.update_critic)
