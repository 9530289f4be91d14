"""Test and benchmark verl plugin: log, inside the worker processes, each call of a step's two overlapped phases.

Loaded in every process of a run through verl's own ``VERL_USE_EXTERNAL_MODULES=phase_log`` (with this
folder on ``PYTHONPATH``); it only measures, it changes nothing. The calls it times, per phase:

- ``update``: the actor's ``update_actor`` and the critic's update (``train_mini_batch``, 0.8/0.9 engine
  workers; ``update_critic``, 0.7's legacy workers);
- ``prep``: the actor's ``compute_log_prob`` and ``compute_ref_log_prob`` (old_log_prob and ref) and the
  critic's values (``infer_batch``; legacy ``compute_values``).

``PHASE_LOG`` names a JSON-lines file; each call appends one line when it returns (or raises):
phase, role, method, pid, ``start``/``end`` on two clocks (``time.time()``, and ``mono_start``/``mono_end``
on ``time.monotonic()``, the clock of verl-split's driver-side intervals and its ``VERL_SPLIT_TRACE``
timeline: on Linux one clock for every process of the machine), ``thread_cpu_s``, the CPU time the
calling thread got meanwhile, and ``run_wait_s``, how long it was ready to run but waited for a core
(Linux ``/proc/thread-self/schedstat``; null where the kernel does not keep it). With one compute thread
per worker (``OMP_NUM_THREADS=1``), a call's wall time is its CPU time, its wait for a core, and the rest:
waiting on other processes (Ray, TransferQueue), I/O or locks.
``tests/support/plugins/slow_updates.py`` times the same calls (wall clock only) and can also slow or fail them.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time

import wrapt

# The actor's calls run a TrainingWorker's train_mini_batch / infer_batch in the same process (and,
# in stock placement, the critic's TrainingWorker lives there too): inner calls are the actor's.
_in_actor = threading.local()


def _run_wait() -> float | None:
    """Seconds the calling thread has spent ready to run but waiting for a core, so far."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _timed(phase: str, role: str, method):
    @functools.wraps(method)  # keeps verl's `register` metadata on the method
    def call(self, *args, **kwargs):
        path = os.environ.get("PHASE_LOG")
        if not path or (role == "critic" and getattr(_in_actor, "active", False)):
            return method(self, *args, **kwargs)
        outer = getattr(_in_actor, "active", False)
        _in_actor.active = outer or role == "actor"
        wall, mono, cpu, wait = time.time(), time.monotonic(), time.thread_time(), _run_wait()
        try:
            return method(self, *args, **kwargs)
        finally:
            record = {
                "phase": phase,
                "role": role,
                "method": method.__name__,
                "pid": os.getpid(),
                "start": wall,
                "end": time.time(),
                "mono_start": mono,
                "mono_end": time.monotonic(),
                "thread_cpu_s": time.thread_time() - cpu,
                "run_wait_s": None,
            }
            waited = _run_wait()
            if wait is not None and waited is not None:
                record["run_wait_s"] = waited - wait
            _in_actor.active = outer
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")

    return call


def _wrap(cls, name: str, phase: str, role: str) -> None:
    setattr(cls, name, _timed(phase, role, getattr(cls, name)))


@wrapt.when_imported("verl.workers.engine_workers")
def _patch_engine_workers(module):
    actor, critic = module.ActorRolloutRefWorker, module.TrainingWorker
    _wrap(actor, "update_actor", "update", "actor")
    _wrap(critic, "train_mini_batch", "update", "critic")
    _wrap(actor, "compute_log_prob", "prep", "actor")
    _wrap(actor, "compute_ref_log_prob", "prep", "actor")
    _wrap(critic, "infer_batch", "prep", "critic")


@wrapt.when_imported("verl.workers.fsdp_workers")
def _patch_legacy_workers(module):
    actor, critic = module.ActorRolloutRefWorker, module.CriticWorker
    _wrap(actor, "update_actor", "update", "actor")
    _wrap(critic, "update_critic", "update", "critic")
    _wrap(actor, "compute_log_prob", "prep", "actor")
    _wrap(actor, "compute_ref_log_prob", "prep", "actor")
    _wrap(critic, "compute_values", "prep", "critic")
