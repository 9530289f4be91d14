"""Rollout on both pools ("shared rollout"): the critic pool's GPUs generate too.

Under split placement only the actor pool's hybrid replicas generate, so the critic pool idles
through generation, usually the longest phase (verl issue 977). With shared rollout on
(``split_placement.shared_rollout`` / ``VERL_SPLIT_SHARED_ROLLOUT``), verl's trainer gets (the v1 trainer of
0.9 in ``sync`` mode, and ``RayPPOTrainer`` of 0.8 and 0.9: the same steps, hooked in where each trainer builds
its rollout, ``hooks.py``):

1. Extra rollout replicas on the critic pool, one per ``tp x dp x pp`` of its GPUs, beside the
   critic's workers: verl's own ``RolloutReplica.init_colocated``, which the reward-model and
   teacher replicas use (``verl/workers/rollout/replica.py``), on sub-pools from verl's
   ``split_resource_pool``. Replica ranks continue after the hybrid replicas' (server names
   contain the rank).
2. Those servers in the load balancer every request goes through (``GlobalRequestLoadBalancer``:
   least in-flight requests first, so replicas of different speeds balance themselves; in
   ``verl/workers/rollout/llm_server.py`` on 0.9.0 and main, moved to ``router.py`` in 0.9.1, which
   re-exports it from ``llm_server``). verl-split starts the balancer
   again with every server in it, as a subclass that counts where requests go and can hold
   the critic pool's servers back for a late join (``balancer.py``); a custom router
   (``router_config_path``) keeps its own balancer and gets the servers with ``add_servers``,
   and then the share metric is not measured and the critic pool joins at the weight sync.
3. The actor's weights on those replicas after every actor update: a second verl
   ``CheckpointEngineManager`` for them, beside verl's ``naive`` one for the hybrid replicas,
   behind ``both_pools.BothPoolsCheckpointManager``, which the trainer uses as its
   ``checkpoint_manager``. The push runs first (on GPUs the hybrid replicas still sleep then,
   leaving the actor's memory to the transfer buffers), into replicas woken just before it; after
   generation they sleep with the hybrid ones. With the deferred critic update still running at the
   sync, the actor pool generates at once and the push comes when that update ends, the critic pool
   joining the step's generation late (``late_join.py``); the actor's GPUs then hold the rollout
   replicas and the transfer buffers at once. Its engine is the config's
   ``checkpoint_engine.backend``: ``nccl`` on GPUs when left ``naive``, verl-split's object-store
   engine in the CPU dry run (``verl_split/runtime/cpu/weight_transfer.py``).

Metrics per step: ``split/critic_pool_rollout_share`` (requests routed to the critic pool's
replicas / all requests of the step's generation) and ``split/shared_rollout_sync_s`` (the push),
through verl's ``_pending_sync_metrics`` (``trainer_base.py`` ``_consume_sync_metrics``).
Generation keeps verl's ``timing_s/gen``.

What only a GPU run can check (none was made by us): NCCL, vLLM's sleep levels on colocated
replicas and memory beside the critic's training state. The critic's offload during generation
is verl's own (``critic.fsdp.param_offload`` / ``optimizer_offload``), not set here.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray
from verl.utils.ray_utils import auto_await

# verl 0.9.1 moved the balancer to verl/workers/rollout/router.py (PR 7115) and re-exports it here
# (an import at llm_server.py's top); 0.9.0 and main@1dda039 define it here. This module is imported
# only when shared rollout is on (hooks.py); the preflight declares these names (seams.py).
from verl.workers.rollout.llm_server import GlobalRequestLoadBalancer

from verl_split.core import settings
from verl_split.placement import Job
from verl_split.placement.job_config import trainer_job
from verl_split.runtime.placement.nodes import announce
from verl_split.runtime.shared_rollout import watchdog
from verl_split.runtime.shared_rollout.balancer import actor_class as balancer_actor_class
from verl_split.runtime.shared_rollout.both_pools import BothPoolsCheckpointManager

#: The weight-transfer engine for replicas on other GPUs when the config leaves verl's ``naive``.
GPU_BACKEND = "nccl"


# ----------------------------------------------------------------------------- the trainer's config


def configure_weight_transfer(config: Any, job: Job) -> str:
    """Give the actor's workers an engine that reaches replicas on other GPUs; return its name.

    Runs before verl builds the actor's worker class: the actor worker creates its checkpoint
    engine from ``rollout.checkpoint_engine`` in ``init_model`` (``verl/workers/engine_workers.py``).
    The hybrid replicas keep verl's in-process sync: the v1 trainer's own manager forces ``naive``.
    ``job``: ``config``'s, read before this rewrites the backend (its type was checked there).
    """
    from omegaconf import open_dict
    from verl.utils.device import get_device_name

    backend = job.rollout.checkpoint_backend
    if backend != "naive":
        return backend
    with open_dict(config.actor_rollout_ref.rollout.checkpoint_engine) as engine:
        if get_device_name() == "cpu":
            from verl_split.runtime.cpu import weight_transfer

            engine.backend = weight_transfer.BACKEND
            engine.custom_backend_module = weight_transfer.MODULE
        else:
            engine.backend = GPU_BACKEND
        return engine.backend


# ----------------------------------------------------------------------------- routing


def _route_to_all(manager: Any, replicas: list[Any], job: Job) -> Any | None:
    """Put ``replicas``' servers beside the hybrid ones; return the counting balancer, if ours."""
    added = {r.server_address: r.server_handle for r in replicas}
    if uses_verls_balancer(manager):
        servers = dict(zip(manager.server_addresses, manager.server_handles, strict=True)) | added
        # max_cache_size left to the class's default, DEFAULT_ROUTING_CACHE_SIZE (router.py on 0.9.1,
        # llm_server.py on 0.9.0 and 0.8.0): the value verl passes. full_determinism only when set: 0.8.0's
        # balancer takes no such argument (its __init__, llm_server.py) and its rollout config has no such key.
        determinism = {"full_determinism": True} if job.rollout.full_determinism else {}
        balancer = balancer_actor_class().remote(
            servers=servers, admission_order=settings.current().tail, **determinism
        )
        previous, manager.global_load_balancer = manager.global_load_balancer, balancer
        # Nothing holds it yet: v1 hands out clients after the trainer's _setup, v0 right after this (start).
        # Killed once it has started: a kill that reached an actor still starting left its process running
        # after the run, once in three CPU runs (code_review_3.md item 8).
        ray.get(previous.__ray_ready__.remote())
        ray.kill(previous)
        return balancer
    ray.get(manager.global_load_balancer.add_servers.remote(added))
    announce("shared rollout: a custom router routes the requests; split/critic_pool_rollout_share is not measured")
    return None


def uses_verls_balancer(manager: Any) -> bool:
    """verl routes through its own ``GlobalRequestLoadBalancer``: no custom class, no router config.

    0.9.1 keeps ``_load_balancer_cls`` None unless a class is passed (``LLMServerManager.__init__`` in
    ``llm_server.py``); 0.9.0 and main@1dda039 store ``load_balancer_cls or GlobalRequestLoadBalancer`` there.
    """
    cls = getattr(manager, "_load_balancer_cls", None)
    custom_class = cls is not None and cls is not GlobalRequestLoadBalancer
    return not custom_class and not getattr(manager.rollout_config, "router_config_path", None)


# ----------------------------------------------------------------------------- the replicas


@auto_await
async def _launch(manager: Any, pools: list[Any], first_rank: int, gpus_per_node: int) -> list[Any]:
    replicas = [
        manager.rollout_replica_class(
            replica_rank=first_rank + i,
            config=manager.rollout_config,
            model_config=manager.model_config,
            gpus_per_node=gpus_per_node,
        )
        for i in range(len(pools))
    ]
    await asyncio.gather(*[replica.init_colocated(pool) for replica, pool in zip(replicas, pools, strict=True)])
    return replicas


def late_join_requests(job: Job) -> int:
    """A step's requests (prompts x ``rollout.n``), which the late join's caps divide; 0: no late join.

    Under verl's ``full_determinism`` the balancer routes each request by a hash of its id, so that the same
    request lands on the same replica in every run (``router.py`` ``GlobalRequestLoadBalancer``): holding
    requests back for a critic pool that joins late would break that, so there the critic pool joins at the
    weight sync, after the critic's update, as without the deferral.
    """
    if job.rollout.full_determinism:
        announce("shared rollout: full_determinism routes by request id; the critic pool joins at the weight sync")
        return 0
    return job.requests_per_step or 0


def late_join_on(device: str) -> bool:
    """``VERL_SPLIT_LATE_JOIN``: on, off, or (auto) on in the CPU dry run only.

    On GPUs the join pushes the actor's weights over NCCL while the actor pool's vLLM generates on the same
    GPUs: verl's ``get_per_tensor_param`` gathers the actor's parameters there, a second communicator runs
    beside vLLM's collectives, and the actor's weights are exported a second time in the step. None of that
    has run on a GPU yet, so there the critic pool sits out a generation its critic's update runs into,
    until a user switches the join on (docs/shared-rollout.md#the-push-at-scale).
    """
    from verl_split.core import settings

    chosen = settings.current().late_join
    on = device == "cpu" if chosen is None else chosen
    if chosen is None and not on:
        announce(
            "shared rollout: the critic pool sits out a generation that its critic's update runs into (the late "
            "join's push beside a generating vLLM has not run on GPUs; VERL_SPLIT_LATE_JOIN=on to try it)"
        )
    return on


def server_concurrency(job: Job) -> int | None:
    """Requests one rollout server runs at once: 1 for verl-split's CPU rollout (one ``generate`` at a time),
    else the engine's ``max_num_seqs`` when set (vLLM and SGLang read that key; verl's rollout config)."""
    from verl_split.runtime.cpu.rollout import ROLLOUT_NAME as CPU_ROLLOUT

    if job.rollout.name == CPU_ROLLOUT:
        return 1
    return job.rollout.max_num_seqs or None


def attach(trainer: Any, backend: str) -> None:
    """After verl's v1 ``_setup``: start the critic pool's replicas and wire them into the step."""
    started = start(trainer)
    wire(trainer, backend, started)


class Started:
    """The critic pool's replicas, running and routed to, not yet in the weight sync (``start``)."""

    def __init__(self, replicas: list[Any], balancer: Any | None, hybrid: int, replica_gpus: int, seconds: float):
        self.replicas = replicas
        self.balancer = balancer  # the counting balancer, or None under a custom router
        self.hybrid = hybrid  # the actor pool's replicas
        self.replica_gpus = replica_gpus
        self.seconds = seconds


def start(trainer: Any) -> Started:
    """Start the critic pool's replicas and route requests to them (``trainer.llm_server_manager``'s balancer).

    v1 (``hooks.wrap_setup``) calls it after ``_setup``, v0 (``hooks.wrap_get_client``) inside ``init_workers``
    before verl hands its balancer to the agent loop: both before any client holds the balancer.
    """
    from verl.single_controller.ray.base import split_resource_pool
    from verl.trainer.ppo.utils import Role

    # The planner checked the critic's own pool and its whole replicas before Ray started, and again
    # in this process when the trainer installed the plan (pools.install_plan_on_trainer).
    manager = trainer.llm_server_manager
    critic_pool = trainer.resource_pool_manager.get_resource_pool(Role.Critic)
    hybrid = manager.get_replicas()
    replica_gpus = hybrid[0].world_size  # verl's own count: tensor x data x pipeline parallel
    began = time.perf_counter()
    replicas = _launch(manager, split_resource_pool(critic_pool, replica_gpus), len(hybrid), critic_pool.store[0])
    balancer = _route_to_all(manager, replicas, trainer_job(trainer))
    return Started(replicas, balancer, len(hybrid), replica_gpus, time.perf_counter() - began)


def wire(trainer: Any, backend: str, started: Started) -> None:
    """Put the started replicas into the trainer's weight sync: ``trainer.checkpoint_manager`` on both pools.

    After verl built its own manager (v1 ``_setup``, v0 ``init_workers``) and before the first push.
    """
    from verl.checkpoint_engine.base import CheckpointEngineManager
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.device import get_device_name

    replicas, balancer = started.replicas, started.balancer
    engine_config = omega_conf_to_dataclass(trainer.config.actor_rollout_ref.rollout.checkpoint_engine)
    from verl_split.runtime.cpu import weight_transfer

    if backend == weight_transfer.BACKEND:
        # The dry run's mailbox actor starts here, not inside the first push: the push's time is what the late
        # join's rate model weighs a join against (late_join.join_pays), and a new process is no part of it.
        ray.get(weight_transfer.mailbox_ready())
    # By position: 0.9 names the worker group actor_wg, 0.8 trainer (checkpoint_engine/base.py __init__).
    shared = CheckpointEngineManager(engine_config, trainer.actor_rollout_wg, replicas)
    job = trainer_job(trainer)
    requests = late_join_requests(job) if balancer is not None else 0
    trainer.checkpoint_manager = BothPoolsCheckpointManager(
        trainer,
        trainer.checkpoint_manager,
        shared,
        balancer,
        requests_per_step=requests,
        server_concurrency=server_concurrency(job),
        late_join=late_join_on(get_device_name()) if requests else True,
    )
    shared.sleep_replicas()
    watchdog.watch(trainer.checkpoint_manager)  # a server that dies or hangs mid-generation stops the run, named
    ranks = [r.replica_rank for r in replicas]
    announce(
        f"shared rollout: {len(replicas)} rollout replica(s) on the critic pool (replica ranks {ranks}, "
        f"{started.replica_gpus} GPU(s) each) beside {started.hybrid} on the actor pool, started in "
        f"{started.seconds:.1f}s; the actor's weights reach them through checkpoint engine "
        f"{backend!r} after every update"
    )
