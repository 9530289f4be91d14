"""Test-only verl plugin: slow down, fail or kill the actor's and critic's work, and log it.

Loaded in every process of a run through verl's own ``VERL_USE_EXTERNAL_MODULES``
(the tests put this folder on ``PYTHONPATH``). It wraps the *worker-side* methods of
``verl/workers/engine_workers.py`` (0.8, 0.9) and of the legacy
``verl/workers/fsdp_workers.py`` (0.7's default workers), so the intervals it logs are
measured inside the worker processes, independently of what verl-split measures in
the trainer. Two phases of a PPO step:

- ``update``: the actor's ``update_actor`` and the critic's update
  (``train_mini_batch`` / legacy ``update_critic``);
- ``prep``: the actor's ``compute_log_prob`` and ``compute_ref_log_prob`` (old_log_prob
  and ref) and the critic's values (``infer_batch`` / legacy ``compute_values``).

Environment (``PHASE`` is ``UPDATES`` or ``PREP``):
- ``SLOW_UPDATES_LOG``: JSON-lines file: a line when a call starts (phase, role, method, pid,
  start, the Ray placement group the worker runs in, the rows it received and its place in each verl
  mesh: data-parallel rank, collected or not) and one when it ends (+ end).
- ``SLOW_{PHASE}_SLEEP``: seconds to sleep at the start of each call of that phase (default 0);
  ``SLOW_{PHASE}_SLEEP_CRITIC`` / ``_ACTOR``: the same for one role, in place of ``SLOW_{PHASE}_SLEEP``.
- ``SLOW_{PHASE}_FAIL``: ``critic`` or ``actor``: raise inside that role's call of that phase.
- ``SLOW_{PHASE}_KILL``: ``critic`` or ``actor``: kill that worker's process in that call.
- ``SLOW_ROLLOUT_KILL``: ``<replica rank>@<step>``: with shared rollout, kill that replica's CPU
  rollout server right after the trainer pushed it the weights of that step.
- ``SLOW_GENERATE_SLEEP``: seconds each request takes longer on the CPU rollout's servers, so that
  generation lasts long enough for a critic pool to join it late (``late_join.py``).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time

import wrapt

# The actor's own calls run its TrainingWorker's train_mini_batch / infer_batch inside the
# same process: those inner calls belong to the actor, not to the critic.
_inside_actor = threading.local()


def _log(record: dict) -> None:
    path = os.environ.get("SLOW_UPDATES_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _placement_group() -> str | None:
    import ray

    return ray.get_runtime_context().get_placement_group_id()


def _rows(args) -> int | None:
    """How many samples this rank received (a DataProto, a TensorDict or verl v1's batch meta)."""
    try:
        return len(args[0])
    except Exception:
        return None


def _mesh(worker) -> dict:
    """This rank's place in each of its roles' meshes as verl registered it
    (``Worker._register_dispatch_collect_info``): mesh name -> [data-parallel rank, collected or not]."""
    ranks = getattr(worker, "_Worker__dispatch_dp_rank", {})
    collect = getattr(worker, "_Worker__collect_dp_rank", {})
    return {name: [ranks[name], bool(collect.get(name))] for name in ranks}


def _instrument(phase, role, original):
    knob = "SLOW_UPDATES" if phase == "update" else "SLOW_PREP"

    @functools.wraps(original)  # keeps verl's `register` metadata (verl's MAGIC_ATTR)
    def call(self, *args, **kwargs):
        if role == "critic" and getattr(_inside_actor, "active", False):
            return original(self, *args, **kwargs)
        start = time.time()
        base = {"phase": phase, "role": role, "method": original.__name__, "pid": os.getpid(), "start": start}
        _log({**base, "placement_group": _placement_group(), "rows": _rows(args), "mesh": _mesh(self)})
        time.sleep(float(os.environ.get(f"{knob}_SLEEP_{role.upper()}", os.environ.get(f"{knob}_SLEEP", "0"))))
        if os.environ.get(f"{knob}_KILL") == role:
            os._exit(1)
        if os.environ.get(f"{knob}_FAIL") == role:
            raise RuntimeError(f"injected failure in the {role}'s {original.__name__}")
        _inside_actor.active = role == "actor"
        try:
            return original(self, *args, **kwargs)
        finally:
            _inside_actor.active = False
            _log({**base, "end": time.time()})

    return call


@wrapt.when_imported("verl.workers.engine_workers")
def _patch(module):
    actor, critic = module.ActorRolloutRefWorker, module.TrainingWorker
    actor.update_actor = _instrument("update", "actor", actor.update_actor)
    critic.train_mini_batch = _instrument("update", "critic", critic.train_mini_batch)
    actor.compute_log_prob = _instrument("prep", "actor", actor.compute_log_prob)
    actor.compute_ref_log_prob = _instrument("prep", "actor", actor.compute_ref_log_prob)
    critic.infer_batch = _instrument("prep", "critic", critic.infer_batch)


@wrapt.when_imported("verl.workers.fsdp_workers")
def _patch_legacy(module):
    actor, critic = module.ActorRolloutRefWorker, module.CriticWorker
    actor.update_actor = _instrument("update", "actor", actor.update_actor)
    critic.update_critic = _instrument("update", "critic", critic.update_critic)
    actor.compute_log_prob = _instrument("prep", "actor", actor.compute_log_prob)
    actor.compute_ref_log_prob = _instrument("prep", "actor", actor.compute_ref_log_prob)
    critic.compute_values = _instrument("prep", "critic", critic.compute_values)


# Shared rollout (tests/e2e/test_shared_rollout_e2e.py): SLOW_ROLLOUT_KILL=<replica rank>@<step> kills
# that replica's rollout server right after the trainer pushed it the weights of that step, so the
# next step's generation meets a dead server, as after a crash between two steps. Done in the
# trainer: where verl loads this plugin while the server's own module is half-imported, that
# module cannot be patched yet.
@wrapt.when_imported("verl_split.runtime.shared_rollout.both_pools")
def _patch_shared_rollout(module):
    knob = os.environ.get("SLOW_ROLLOUT_KILL")
    # Only the trainer's process: in the balancer's, verl loads this plugin while the module is half-imported.
    if not knob or not hasattr(module, "BothPoolsCheckpointManager"):
        return
    rank, step = (int(part) for part in knob.split("@"))
    original = module.BothPoolsCheckpointManager.update_weights

    def update_weights(self, global_steps=None):
        result = original(self, global_steps)
        if global_steps == step:
            import ray

            from verl_split.runtime.cpu.rollout import server_name

            ray.kill(ray.get_actor(server_name(rank)))
            _log({"phase": "rollout", "killed": server_name(rank), "after_push_of_step": step, "at": time.time()})
        return result

    module.BothPoolsCheckpointManager.update_weights = update_weights


# SLOW_GENERATE_SLEEP: the servers are launched by the trainer-side replica (verl_split/runtime/cpu/rollout.py,
# ray.remote(CPUGenerationServer)); giving it a subclass there reaches every server, while patching the server's
# own module in its process would meet it half-imported (as above).
@wrapt.when_imported("verl_split.runtime.cpu.rollout")
def _slow_generation(module):
    delay = float(os.environ.get("SLOW_GENERATE_SLEEP", "0"))
    if not delay or not hasattr(module, "CPUGenerationServer"):
        return
    base = module.CPUGenerationServer

    class SlowGenerationServer(base):
        def _generate(self, *args, **kwargs):
            with self._lock:  # one request at a time, as the generation itself: the delays add up
                start = time.time()
                time.sleep(delay)
            _log({"phase": "generate", "replica": self.replica_rank, "weights": self.global_steps, "start": start})
            return super()._generate(*args, **kwargs)

    module.CPUGenerationServer = SlowGenerationServer
