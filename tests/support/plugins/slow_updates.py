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
- ``SLOW_PREP_FAIL_AFTER_UPDATE``: ``critic`` or ``actor``: raise inside that role's preparation calls once its
  worker has run an update (the second step's on: a run that saves after its first step keeps that checkpoint).
- ``SLOW_GENERATE_SLEEP``: seconds each request takes longer on the CPU rollout's servers, so that
  generation lasts long enough for a critic pool to join it late (``late_join.py``); each request then logs a
  ``generate`` record (replica, the step of its weights, start). The knobs below read those records, and need it.
- ``SLOW_CRITIC_HOLD_STEPS``: ``1,3``: the critic's update of those steps ends only once the next step's
  generation has begun (a ``generate`` record with that step's weights), so it certainly runs on past the
  weight sync (the deferral) whatever the machine's load; at most ``HOLD_LIMIT_S``, then it fails the run.
- ``SLOW_GENERATE_AWAIT``: ``1`` or ``1@2,4``: in every step's generation (or those steps'), each other replica's
  server, after its first request, waits until replica 1 has begun one: a critic pool that joins late certainly
  finds requests still queued, and one there from the start certainly gets some (at most ``HOLD_LIMIT_S``, then
  it goes on and the test sees why).
- ``SLOW_ROLLOUT_DIE``: ``<replica rank>@<step>``: that replica's server process exits at its second request of
  that step's generation (the first done, so the step's routing reached it), its other requests lost with it.
- ``SLOW_ROLLOUT_HANG``: ``<replica rank>@<step>``: that replica's server never ends its first request of that
  step's generation (and, one request at a time, none after it).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time

import wrapt

# The roles whose worker in this process has run an update (SLOW_PREP_FAIL_AFTER_UPDATE).
_updated: set[str] = set()
# The actor's own calls run its TrainingWorker's train_mini_batch / infer_batch inside the
# same process: those inner calls belong to the actor, not to the critic.
_inside_actor = threading.local()
#: The longest a held critic update or a server awaiting another replica waits for what it waits for.
HOLD_LIMIT_S = 300.0


def _log(record: dict) -> None:
    path = os.environ.get("SLOW_UPDATES_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _generated() -> list[dict]:
    """The ``generate`` records logged so far (every server's, every step's)."""
    path = os.environ.get("SLOW_UPDATES_LOG")
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f if '"generate"' in line]
    return [r for r in records if r.get("phase") == "generate"]


def _wait_for(what: str, found) -> bool:
    """Poll the log until ``found(records)``; False after ``HOLD_LIMIT_S``."""
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not found(_generated()):
        if time.monotonic() > deadline:
            _log({"phase": "hold", "gave_up": what, "at": time.time()})
            return False
        time.sleep(0.05)
    return True


def _steps(name: str) -> set[int]:
    return {int(step) for step in os.environ.get(name, "").split(",") if step.strip()}


class _Every:
    """Every step."""

    def __contains__(self, step: int) -> bool:
        return True


def _replica_at_steps(name: str) -> tuple[int, object] | None:
    """``<replica>`` (every step) or ``<replica>@<step>[,<step>...]``."""
    knob = os.environ.get(name)
    if not knob:
        return None
    rank, _, steps = knob.partition("@")
    return int(rank), ({int(s) for s in steps.split(",")} if steps else _Every())


def _applies(knob: tuple[int, object] | None, rank: int, step: int) -> bool:
    return knob is not None and knob[0] == rank and step in knob[1]


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
        if phase == "prep" and os.environ.get("SLOW_PREP_FAIL_AFTER_UPDATE") == role and role in _updated:
            raise RuntimeError(f"injected failure in the {role}'s {original.__name__} after its first update")
        # The step of this call: the weights its step generated with, plus one (the critic updates after generating).
        step = max((r["weights"] for r in _generated()), default=-1) + 1
        _inside_actor.active = role == "actor"
        try:
            return original(self, *args, **kwargs)
        finally:
            _inside_actor.active = False
            if phase == "update":
                _updated.add(role)
            held = phase == "update" and role == "critic" and step in _steps("SLOW_CRITIC_HOLD_STEPS")
            if held and not _wait_for(
                f"step {step + 1}'s generation", lambda rs: any(r["weights"] >= step for r in rs)
            ):
                raise RuntimeError(f"SLOW_CRITIC_HOLD_STEPS: step {step + 1}'s generation never began")
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


# SLOW_GENERATE_SLEEP: the servers are launched by the trainer-side replica (verl_split/runtime/cpu/rollout.py,
# ray.remote(CPUGenerationServer)); giving it a subclass there reaches every server, while patching the server's
# own module in its process would meet it half-imported (verl loads this plugin while that module imports).
@wrapt.when_imported("verl_split.runtime.cpu.rollout")
def _slow_generation(module):
    delay = float(os.environ.get("SLOW_GENERATE_SLEEP", "0"))
    if not delay or not hasattr(module, "CPUGenerationServer"):
        return
    base = module.CPUGenerationServer

    awaited = _replica_at_steps("SLOW_GENERATE_AWAIT")
    dies, hangs = _replica_at_steps("SLOW_ROLLOUT_DIE"), _replica_at_steps("SLOW_ROLLOUT_HANG")

    class SlowGenerationServer(base):
        def _generate(self, *args, **kwargs):
            rank, weights = self.replica_rank, self.global_steps
            step = weights + 1  # the step whose generation this is
            with self._lock:  # one request at a time, as the generation itself: the delays add up
                start = time.time()
                time.sleep(delay)
                # Under the lock, so two requests of one server never both take themselves for its first.
                first = not any(r["replica"] == rank and r["weights"] == weights for r in _generated())
                if _applies(dies, rank, step) and not first:
                    _log({"phase": "rollout", "died": rank, "step": step, "at": time.time()})
                    os._exit(1)
                if _applies(hangs, rank, step):  # it holds the lock: nothing after it on this server ends either
                    _log({"phase": "rollout", "hangs": rank, "step": step, "at": time.time()})
                    threading.Event().wait()
                _log({"phase": "generate", "replica": rank, "weights": weights, "start": start})
            if awaited is not None and rank != awaited[0] and step in awaited[1] and not first:
                _wait_for(
                    f"replica {awaited[0]} generating in step {step}",
                    lambda rs: any(r["replica"] == awaited[0] and r["weights"] == weights for r in rs),
                )
            return super()._generate(*args, **kwargs)

    module.CPUGenerationServer = SlowGenerationServer


# The same knobs on the real vLLM's servers (the vLLM tier, tests/on_vllm/): verl's vLLMReplica launches
# ray.remote(vLLMHttpServer) from the trainer's process; a subclass there reaches every server. SLOW_GENERATE_SLEEP,
# the generate records (hence SLOW_CRITIC_HOLD_STEPS), SLOW_GENERATE_AWAIT and SLOW_ROLLOUT_DIE. vLLM serves a
# server's requests at once, so each request's delay and waits run on a thread of the server's own (never the
# event loop's default pool, which vLLM may use), and a request's bookkeeping under a lock of the server's.
@wrapt.when_imported("verl.workers.rollout.vllm_rollout.vllm_async_server")
def _slow_vllm_generation(module):
    delay = float(os.environ.get("SLOW_GENERATE_SLEEP", "0"))
    if not delay:
        return
    import asyncio
    import concurrent.futures

    import ray

    awaited, dies = _replica_at_steps("SLOW_GENERATE_AWAIT"), _replica_at_steps("SLOW_ROLLOUT_DIE")

    def before_request(lock, rank: int, weights: int) -> None:
        start = time.time()
        time.sleep(delay)
        step = weights + 1
        with lock:
            first = not any(r["replica"] == rank and r["weights"] == weights for r in _generated())
            if _applies(dies, rank, step) and not first:
                _log({"phase": "rollout", "died": rank, "step": step, "at": time.time()})
                os._exit(1)
            _log({"phase": "generate", "replica": rank, "weights": weights, "start": start})
        if awaited is not None and rank != awaited[0] and step in awaited[1] and not first:
            _wait_for(
                f"replica {awaited[0]} generating in step {step}",
                lambda rs: any(r["replica"] == awaited[0] and r["weights"] == weights for r in rs),
            )

    class SlowVLLMServer(module.vLLMHttpServer):
        async def generate(self, *args, **kwargs):
            if not hasattr(self, "_slow_pool"):  # made in the server's process: neither pickles
                self._slow_lock = threading.Lock()
                self._slow_pool = concurrent.futures.ThreadPoolExecutor(max_workers=256)
            await asyncio.get_running_loop().run_in_executor(
                self._slow_pool, before_request, self._slow_lock, self.replica_rank, self.global_steps or 0
            )
            return await super().generate(*args, **kwargs)

    replica_init = module.vLLMReplica.__init__

    @functools.wraps(replica_init)
    def init(self, *args, **kwargs):
        replica_init(self, *args, **kwargs)
        self.server_class = ray.remote(SlowVLLMServer)

    module.vLLMReplica.__init__ = init
