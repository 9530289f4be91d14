"""verl-split's control plane at production sizes, on CPU: one step's requests through the real balancer and the
real late join, and the planner and the node choice on 16 x 8 and 128 x 8 GPUs.

What is real: verl-split's ``SharedRolloutBalancer`` (verl's ``GlobalRequestLoadBalancer`` subclass) as the Ray
async actor a run starts, ``BothPoolsCheckpointManager`` and its ``LateJoin`` on the driver, the rate model, the
barrier on every critic rank, the planner (``plan_from_config``), the node reader (``cluster_nodes``) and the
node choice (``check_fit``). What stands in, because it has no CPU path or is not verl-split's:

* the rollout servers: each takes up to ``max_num_seqs`` requests at once and answers each after ``tokens / rate``
  seconds (a per-token rate, no weights), tagged with the weights' step it holds; the actor pool's 24 in one Ray
  async actor, each critic-pool server an actor of its own (this machine has 2 cores);
* verl's agent-loop workers: Ray actors that send every request of the step at once, each as verl's client
  does (``acquire_server``, ``generate`` on the server it names, ``release_server`` without waiting);
* the checkpoint managers: the actor pool's sets its servers' weights at the sync; the critic pool's wakes its
  servers and pushes (a fixed ``--push-s`` sleep) when the late join says so;
* the critic's update: two critic-rank actors that sleep, the non-collected one longer; verl's future is rank
  0's.

One step per request count (1k, 4k, 16k by default) on 32 servers (24 on the actor pool, 8 on the critic pool,
which joins late when the critic's update ends). Per step:

* ``gen_s``: the step's generation (the balancer's clock: first request to last release);
* ``overhead_s``: verl-split's own time on the step's path: the balancer's routing code (``own_s``, the CPU time
  of the actor's thread in it, so that the other processes of this 2-core machine do not inflate it) plus the
  driver's wall time in the manager's calls beyond the stand-ins (the sync's gating, the end of generation's
  accounting); ``overhead_share`` = overhead / gen;
* ``model_gen_s``: what the rate model predicts for the step with the critic pool joining when it did, and what
  the critic pool took against what the model says it would;
* ``lost``, ``served_twice``, ``stale_weights``: requests never answered, answered twice, answered by a server
  holding another step's weights.

Then the planner on 16 x 8 and 128 x 8 GPUs (a shared-rollout job with a TP-4 rollout, ``plan_s``) and the node
reader + node choice on as many Ray nodes plus spares, two busy and one draining (``choose_s``); and one fault
run: a critic-pool server killed mid-step at the largest size, timed until the step's error and the manager's
naming of the dead replica.

    .venv/bin/python benchmarks/control_plane.py --json benchmarks/control_plane.json [--repeats 3]

Goals (issue 33): overhead under 1 % of the step's generation at 16k requests, growing no faster than the
requests (16k / 1k at most 20x), planning 128 x 8 GPUs in under 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ray

from verl_split.core.errors import PlacementError
from verl_split.placement.verl_config import plan_from_config
from verl_split.runtime.overlap import deferral
from verl_split.runtime.placement.choice import check_fit
from verl_split.runtime.placement.nodes import NodeLoad, cluster_nodes
from verl_split.runtime.shared_rollout.balancer import MAX_CONCURRENCY, SharedRolloutBalancer
from verl_split.runtime.shared_rollout.both_pools import BothPoolsCheckpointManager
from verl_split.runtime.shared_rollout.late_join import join_pays

ROOT = Path(__file__).resolve().parent.parent
#: Servers on each pool: 24 + 8 (e.g. 96 actor-pool GPUs and 32 critic-pool GPUs at rollout TP 4).
HYBRID, SHARED = 24, 8
#: vLLM's max_num_seqs: requests a server runs at once.
MAX_NUM_SEQS = 256
#: verl's agent-loop workers sending the requests.
CLIENTS = 4
#: The fault run must end (every request answered or failed, the manager's error raised) within this long.
FAULT_LIMIT_S = 600


# ----------------------------------------------------------------------------- stand-ins


@ray.remote(num_cpus=0)
class StandInServers:
    """Rollout servers in one process (the actor pool's 24 share one, each critic-pool server has its own, so the
    fault run can kill one): each takes up to ``MAX_NUM_SEQS`` requests at once, each ``tokens / rate`` seconds.
    One process for many keeps this 2-core machine's process count down; each server is still its own queue."""

    def __init__(self, names: list[str], rate: float) -> None:
        self.rate = rate
        self.weights = dict.fromkeys(names, -1)
        self.slots = {name: asyncio.Semaphore(MAX_NUM_SEQS) for name in names}

    async def set_weights(self, step: int) -> None:
        self.weights = dict.fromkeys(self.weights, step)

    async def generate(self, server: str, request_id: str, tokens: int) -> tuple[str, str, int]:
        async with self.slots[server]:
            weights = self.weights[server]  # the weights the request is generated with
            await asyncio.sleep(tokens / self.rate)
        return request_id, server, weights


@ray.remote(num_cpus=0)
class StandInClients:
    """verl's agent-loop worker: every request at once, as ``LLMServerClient`` sends it."""

    def __init__(self, balancer: Any) -> None:
        self.balancer = balancer

    async def run(self, requests: list[tuple[str, int]]) -> list[Any]:
        async def one(request_id: str, tokens: int) -> Any:
            server_id, handle = await self.balancer.acquire_server.remote(request_id=request_id)
            try:
                return await handle.generate.remote(server_id, request_id, tokens)
            except Exception as exc:  # verl's agent loop would fail the generation here, at the first one
                # A dict, not a class of this script's: what Ray returns must mean the same on the driver.
                return {"server": server_id, "error": f"{type(exc).__name__}: {str(exc)[:300]}", "at": time.time()}
            finally:
                self.balancer.release_server.remote(server_id=server_id)

        return await asyncio.gather(*[one(r, t) for r, t in requests], return_exceptions=True)


@ray.remote(num_cpus=0)
class StandInCriticRank:
    """A synchronous critic worker, as verl's ``TrainingWorker`` is: its update a sleep."""

    def update(self, seconds: float) -> float:
        time.sleep(seconds)
        return time.monotonic()


class StandInManager:
    """A checkpoint manager: the actor pool's sets the weights at the sync, the critic pool's wakes and pushes."""

    def __init__(self, servers: dict[str, Any], push_s: float, first_rank: int = 0) -> None:
        self.servers, self.push_s = servers, push_s
        self.replicas = [
            SimpleNamespace(replica_rank=first_rank + i, server_address=name, servers=[handle])
            for i, (name, handle) in enumerate(servers.items())
        ]
        self.spent_s = 0.0  # time in the stand-in's own calls: not verl-split's

    def _timed(self, work: Any) -> None:
        started = time.perf_counter()
        work()
        self.spent_s += time.perf_counter() - started

    def update_weights(self, global_steps: int | None = None) -> str:
        def push() -> None:
            time.sleep(self.push_s)
            ray.get([server.set_weights.remote(global_steps) for server in set(self.servers.values())])

        self._timed(push)
        return "synced"

    def wake_up_replicas(self) -> None:
        pass

    def sleep_replicas(self) -> None:
        self._timed(lambda: ray.get([s.__ray_ready__.remote() for s in set(self.servers.values())], timeout=30))


# ----------------------------------------------------------------------------- one step


def request_tokens(count: int, mean_tokens: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(f"req-{i}", int(mean_tokens * rng.uniform(0.25, 1.75))) for i in range(count)]


def model_generation(tokens: list[int], rate: float, opened_after: float | None) -> tuple[float, float]:
    """The rate model's step: (generation seconds, share the critic pool takes) with ``HYBRID`` servers from the
    start and ``SHARED`` more from ``opened_after``, each running ``MAX_NUM_SEQS`` requests at once, in order."""
    slots = [0.0] * (HYBRID * MAX_NUM_SEQS)
    late = [] if opened_after is None else [opened_after] * (SHARED * MAX_NUM_SEQS)
    free = [(t, 0) for t in slots] + [(t, 1) for t in late]
    import heapq

    heapq.heapify(free)
    end, on_critic = 0.0, 0
    for n in tokens:
        start, pool = heapq.heappop(free)
        finish = start + n / rate
        end = max(end, finish)
        on_critic += pool
        heapq.heappush(free, (finish, pool))
    return end, on_critic / len(tokens)


def run_step(
    step: int, count: int, world: SimpleNamespace, args: argparse.Namespace, kill_after_s: float | None = None
) -> dict[str, Any]:
    """One step's generation at ``count`` requests, the critic pool joining late; its figures."""
    requests = request_tokens(count, args.mean_tokens, seed=step)
    rate = args.mean_tokens / args.latency_s
    expected = model_generation([t for _, t in requests], rate, None)[0]
    trainer = SimpleNamespace(critic_wg=SimpleNamespace(workers=world.critic_ranks))
    hybrid = StandInManager(world.hybrid, push_s=0.0)
    shared = StandInManager(world.shared, push_s=args.push_s, first_rank=HYBRID)
    manager = BothPoolsCheckpointManager(
        trainer, hybrid, shared, world.balancer, requests_per_step=count, server_concurrency=MAX_NUM_SEQS
    )
    manager._push_s = args.push_s  # as measured at step 1's sync, when the critic pool joined from the start
    ray.get([s.set_weights.remote(step - 1) for s in {*world.hybrid.values(), *world.shared.values()}])

    # The critic's update of the step before, running on: rank 1 (not collected) ends 0.5 s after rank 0.
    critic_s = args.critic_share * expected
    ends = [rank.update.remote(critic_s + 0.5 * i) for i, rank in enumerate(world.critic_ranks)]
    collected: concurrent.futures.Future = concurrent.futures.Future()
    threading.Thread(target=lambda: collected.set_result(ray.get(ends[0])), daemon=True).start()
    deferral.running_update = lambda: None if collected.done() else collected

    started = time.perf_counter()
    manager.update_weights(step)  # the sync: the actor pool generates now, the critic pool joins late
    sync_s = time.perf_counter() - started - hybrid.spent_s
    chunks = [requests[i::CLIENTS] for i in range(CLIENTS)]
    generation = [client.run.remote(chunk) for client, chunk in zip(world.clients, chunks, strict=True)]
    if kill_after_s is not None:
        return fault_step(manager, generation, world, kill_after_s, started)
    answers = [a for part in ray.get(generation) for a in part]
    gen_wall = time.perf_counter() - started
    before_sleep = hybrid.spent_s + shared.spent_s
    ended = time.perf_counter()
    late = manager._late
    manager.sleep_replicas()  # generation over: the join's end, the step's account
    end_s = time.perf_counter() - ended - (hybrid.spent_s + shared.spent_s - before_sleep)
    metrics = trainer._pending_sync_metrics
    account = world.last_step  # what sleep_replicas' take_step read (captured below)
    errors = [a for a in answers if isinstance(a, dict)]
    served = [a for a in answers if not isinstance(a, dict)]
    ids = [r for r, _, _ in served]
    on_critic = sum(1 for _, name, _ in served if name in world.shared)
    opened = metrics.get("split/critic_pool_join_s")
    model_s, model_share = model_generation([t for _, t in requests], rate, opened)
    gen_s = account.get("generation_s") or gen_wall
    overhead = account["own_s"] + max(sync_s, 0.0) + max(end_s, 0.0)
    return {
        "requests": count,
        "servers": HYBRID + SHARED,
        "gen_s": gen_s,
        "overhead_s": overhead,
        "overhead_share": overhead / gen_s,
        "overhead_share_of_model": overhead / model_s,  # against what the GPUs would take, not Ray's plumbing here
        "balancer_own_s": account["own_s"],
        "driver_s": max(sync_s, 0.0) + max(end_s, 0.0),
        "critic_update_s": critic_s,
        "critic_pool_joined": metrics.get("split/critic_pool_joined"),
        "critic_pool_join_s": opened,
        "critic_pool_share": on_critic / max(len(served), 1),
        "model_gen_s": model_s,
        "model_critic_pool_share": model_share,
        "alone_model_gen_s": expected,
        "forecast": None if late is None or late.forecast is None else late.forecast.why,
        # The late join's parts, seconds after the critic update's end (verl's future): every rank done, the
        # decision (a round trip to the balancer, queued behind the step's requests), the critic pool open.
        "join_marks_s": {} if late is None else {k: v - late.marks["update_ended"] for k, v in late.marks.items()},
        "lost": count - len(set(ids)),
        "served_twice": len(ids) - len(set(ids)),
        "stale_weights": sum(1 for _, _, weights in served if weights != step),
        "errors": len(errors),
    }


def fault_step(manager: Any, generation: list[Any], world: SimpleNamespace, kill_after_s: float, started: float):
    """Kill a critic-pool server once the critic pool has joined; time the step's error and the manager's."""
    deadline = started + FAULT_LIMIT_S
    victim_name = next(iter(world.shared))
    late = manager._late
    while late is not None and late._state in ("waiting", "joining") and time.perf_counter() < deadline:
        time.sleep(0.05)
    if late is None or not late.joined:
        ray.get(generation)
        manager.sleep_replicas()
        return {"killed": None, "why": "the critic pool did not join this step: nothing to kill mid-generation"}
    time.sleep(kill_after_s)
    killed_at, killed_wall = time.perf_counter(), time.time()
    ray.kill(world.shared[victim_name])
    answers = [a for part in ray.get(generation, timeout=FAULT_LIMIT_S) for a in part]
    failed = [a for a in answers if isinstance(a, dict)]
    generation_s = time.perf_counter() - killed_at
    message = ""
    try:
        manager.sleep_replicas()
    except Exception as exc:  # what the run would stop with
        message = str(exc)
    first = min(failed, key=lambda f: f["at"], default=None)
    return {
        "requests": len(answers),
        "killed": victim_name,
        "requests_failed": len(failed),
        "failed_on": sorted({f["server"] for f in failed}),
        "first_failure_after_kill_s": None if first is None else first["at"] - killed_wall,
        "first_failure": "" if first is None else first["error"],
        "names_the_server": first is not None and victim_name in first["error"],
        "generation_ended_after_kill_s": generation_s,
        "manager_error_after_kill_s": time.perf_counter() - killed_at,
        "manager_error": message[:400],
        "manager_names_the_replica": f"replica(s) [{HYBRID}]" in message,
    }


# ----------------------------------------------------------------------------- the planner at scale


def planner_rows(repeats: int) -> list[dict[str, Any]]:
    rows = []
    for nnodes in (16, 128):
        config = {
            "trainer": {"nnodes": nnodes, "n_gpus_per_node": 8},
            "data": {"train_batch_size": 1024},
            "actor_rollout_ref": {
                "rollout": {"tensor_model_parallel_size": 4, "n": 16, "gpu_memory_utilization": 0.5},
                "actor": {"ppo_mini_batch_size": 192},
            },
            "critic": {"ppo_mini_batch_size": 256},
            # Three quarters of the nodes for the actor pool, the rest for the critic's: 24 + 8 replicas at TP 4
            # on 16 nodes, as the step above has servers.
            "split_placement": {
                "placement": f"actor,rollout,ref:0-{nnodes * 6 - 1};critic:{nnodes * 6}-{nnodes * 8 - 1}",
                "shared_rollout": True,
            },
        }
        # The same job with a mini-batch the actor pool cannot split: refused, with the layouts that would fit
        # (the planner plans each of them), so a refusal at scale costs more than a plan.
        refused_config = {
            **config,
            "actor_rollout_ref": {**config["actor_rollout_ref"], "actor": {"ppo_mini_batch_size": 256}},
        }
        plan_s, choose_s, refuse_s = [], [], []
        plan = None
        for _ in range(repeats):
            t = time.perf_counter()
            plan = plan_from_config(config, "", gpu_gb=80.0)
            plan_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            try:
                plan_from_config(refused_config, "", gpu_gb=80.0)
            except PlacementError:
                refuse_s.append(time.perf_counter() - t)
            else:
                raise AssertionError("the planner accepted a mini-batch that does not split over the actor pool")
            nodes = ray_nodes(nnodes + 3)
            free = {n["NodeID"]: 8.0 for n in nodes}
            free[nodes[1]["NodeID"]] = 2.0  # busy: another job holds 6 GPUs
            free[nodes[5]["NodeID"]] = 0.0  # busy
            load = NodeLoad(free=free, draining={nodes[2]["NodeID"]: 0})
            t = time.perf_counter()
            infos = cluster_nodes("GPU", load, nodes)
            choice = check_fit(plan, plan.resource_pool_spec, infos, "GPU")
            choose_s.append(time.perf_counter() - t)
            skipped = {n.node_id for n in choice.skipped}
            assert {nodes[i]["NodeID"] for i in (1, 2, 5)} <= skipped, "a busy or draining node was chosen"
        rows.append(
            {
                "gpus": nnodes * 8,
                "nodes": nnodes,
                "plan_s": statistics.median(plan_s),
                "plan_s_max": max(plan_s),
                "choose_s": statistics.median(choose_s),
                "refuse_s": statistics.median(refuse_s),
                "pools": {p.name: p.size for p in plan.pools},
            }
        )
    return rows


def ray_nodes(count: int) -> list[dict[str, Any]]:
    """What ``ray.nodes()`` answers for ``count`` alive 8-GPU nodes."""
    return [
        {
            "NodeID": f"{i:056x}",
            "Alive": True,
            "NodeManagerAddress": f"10.0.{i // 250}.{i % 250 + 1}",
            "Resources": {"GPU": 8.0, "CPU": 64.0},
        }
        for i in range(count)
    ]


# ----------------------------------------------------------------------------- the run


def start_world(args: argparse.Namespace) -> SimpleNamespace:
    rate = args.mean_tokens / args.latency_s
    names = [f"rollout-server-{i}" for i in range(HYBRID + SHARED)]
    # Room for every request the servers run at once: Ray's default for an async actor is 1,000 calls.
    farm = StandInServers.options(name="actor-pool-servers", max_concurrency=MAX_CONCURRENCY).remote(
        names[:HYBRID], rate
    )
    servers = {name: farm for name in names[:HYBRID]}
    servers |= {
        name: StandInServers.options(name=name, max_concurrency=MAX_CONCURRENCY).remote([name], rate)
        for name in names[HYBRID:]
    }
    balancer = (
        ray.remote(SharedRolloutBalancer).options(max_concurrency=MAX_CONCURRENCY, num_cpus=0).remote(servers=servers)
    )
    world = SimpleNamespace(
        hybrid={n: servers[n] for n in names[:HYBRID]},
        shared={n: servers[n] for n in names[HYBRID:]},
        balancer=balancer,
        clients=[StandInClients.options(max_concurrency=MAX_CONCURRENCY).remote(balancer) for _ in range(CLIENTS)],
        critic_ranks=[StandInCriticRank.remote() for _ in range(2)],
        last_step={},
    )
    ray.get([a.__ray_ready__.remote() for a in {*servers.values(), balancer, *world.clients, *world.critic_ranks}])
    return world


def capture_take_step(world: SimpleNamespace) -> None:
    """Keep what the manager's ``take_step`` read (the step's timing and the balancer's own time)."""
    original = BothPoolsCheckpointManager.take_step

    def take_step(self):
        world.last_step = original(self)
        return world.last_step

    BothPoolsCheckpointManager.take_step = take_step


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mean-tokens", type=int, default=1000, help="a response's mean length")
    parser.add_argument(
        "--latency-s",
        type=float,
        default=30.0,
        help="a mean response's time on a server in a full batch (1,000 tokens at ~33 tokens/s a sequence)",
    )
    parser.add_argument("--push-s", type=float, default=1.0, help="the critic pool's wake-up and push")
    parser.add_argument(
        "--critic-share", type=float, default=0.3, help="the critic's update, as a share of the actor pool's generation"
    )
    parser.add_argument("--no-fault", action="store_true", help="skip the fault run")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()  # a benchmark wants a quiet machine: the JSON says how quiet it was
    ray.init(num_cpus=8, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    rows: list[dict[str, Any]] = []
    try:
        world = start_world(args)
        capture_take_step(world)
        step = 1
        for repeat in range(args.repeats):
            for count in args.requests:
                step += 1
                row = run_step(step, count, world, args)
                row["repeat"] = repeat
                rows.append(row)
                print(
                    f"{count:>6} requests: generation {row['gen_s']:6.2f}s (model {row['model_gen_s']:.2f}s), "
                    f"verl-split {row['overhead_s'] * 1000:7.1f} ms = {row['overhead_share']:.3%} (balancer "
                    f"{row['balancer_own_s'] * 1000:.1f} ms); critic pool joined at {row['critic_pool_join_s']}, "
                    f"took {row['critic_pool_share']:.1%} (model {row['model_critic_pool_share']:.1%}); lost "
                    f"{row['lost']}, twice {row['served_twice']}, stale {row['stale_weights']}",
                    flush=True,
                )
        fault = None
        if not args.no_fault:
            fault = run_step(step + 1, max(args.requests), world, args, kill_after_s=1.0)
            print(f"fault: {json.dumps(fault)}", flush=True)
    finally:
        ray.shutdown()
    planner = planner_rows(args.repeats)
    for row in planner:
        print(
            f"planner: {row['gpus']} GPUs ({row['nodes']} nodes) planned in {row['plan_s'] * 1000:.1f} ms (max "
            f"{row['plan_s_max'] * 1000:.1f}), refused with suggestions in {row['refuse_s'] * 1000:.1f} ms, nodes "
            f"chosen in {row['choose_s'] * 1000:.1f} ms; pools {row['pools']}"
        )
    summary = summarise(rows, args.requests)
    for count, figures in summary["per_requests"].items():
        ms, share = figures["overhead_s"], figures["overhead_share"]
        print(
            f"{count:>6} requests, {args.repeats} repetitions: overhead {ms['median'] * 1000:.1f} ms "
            f"[{ms['min'] * 1000:.1f}-{ms['max'] * 1000:.1f}], share {share['median']:.3%} "
            f"[{share['min']:.3%}-{share['max']:.3%}] of generation {figures['gen_s']['median']:.1f}s"
        )
    print(f"overhead growth {max(args.requests)} / {min(args.requests)} requests: {summary['growth']:.1f}x")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "steps": rows,
                    "planner": planner,
                    "fault": fault,
                    "summary": summary,
                    "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
                },
                indent=1,
            )
            + "\n"
        )
    return 0


def summarise(rows: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    per = {}
    for count in counts:
        mine = [r for r in rows if r["requests"] == count]
        per[count] = {key: spread([r[key] for r in mine]) for key in ("gen_s", "overhead_s", "overhead_share")}
    low, high = min(counts), max(counts)
    growth = per[high]["overhead_s"]["median"] / max(per[low]["overhead_s"]["median"], 1e-9)
    return {"per_requests": per, "growth": growth, "join_model": join_pays.__doc__.splitlines()[0]}


if __name__ == "__main__":
    sys.exit(main())
