"""Does shared rollout's late join ever make a step's generation slower? Four arms on one harness, on CPU.

One step's generation at 1,024, 4,096 and 16,384 requests (1,024 prompts x n = 16) on 24 + 8 stand-in rollout servers,
the critic's update of the step before running on into it (verl-split's deferral), in four arms:

1. ``stock``: verl's own routing (verl's ``GlobalRequestLoadBalancer`` as verl starts it, ``get_router_handle``)
   over the actor pool's 24 servers: split placement with the deferral, no shared rollout;
2. ``gate``: verl-split's balancer over all 32, the critic pool parked all step (``VERL_SPLIT_LATE_JOIN=off``: what
   shared rollout does on GPUs by default when the critic's update runs past the weight sync);
3. ``late_join``: the critic pool joins when the critic's update has ended on every rank, if the rate model says it
   pays (``late_join.py``);
4. ``shared_from_start``: the critic's update ended before the sync (no deferral): the push at the sync, on the
   step's path, and all 32 servers from the step's first request: the upper bound of the generation.

What is real: verl's balancer (arm 1), verl-split's ``SharedRolloutBalancer`` as the Ray async actor a run starts
(arms 2-4, one actor for the three), ``BothPoolsCheckpointManager`` with its ``LateJoin`` on the driver (one manager
per arm and size, across the repetitions, measuring its own push: two syncs before its first step, as a run's
start-up sync and the next, so that the rate model has a warm push), the rate model, the rank barrier. What stands in:

* the rollout servers and verl's agent-loop workers, in one Ray actor (``GenerationSide``; one process keeps this
  2-core machine's CPU for the balancer): every request of the step sent at once, each as verl's client does
  (``acquire_server`` on the balancer, generate on the server it names, ``release_server`` without waiting); a
  server runs up to ``max_num_seqs`` requests at once, each for ``tokens / rate`` seconds, tagged with the weights'
  step the server holds;
* the checkpoint managers: the actor pool's sets its servers' weights at the sync, the critic pool's sleeps
  ``--push-s`` (its wake-up and push) then sets its servers';
* the critic's update: two critic-rank actors that sleep ``--critic-share`` of the step's modelled generation, the
  rank verl does not collect from 0.5 s longer.

Response lengths: long-tailed, a lognormal fitted to a published verl run, capped at its ``max_response_length``
(``control_plane_model.py``). The same lengths in every arm of a repetition and size.

Per step (``--json`` rows): ``gen_s``, the step's generation as the trainer waits for it (from the weight sync's
start to the end of ``sleep_replicas``, the join's end included), ``lost``, ``served_twice``, ``stale_weights``
(answered by a server holding another step's weights), ``critic_pool_share``, ``model_gen_s`` (the event model's
generation for the arm's routing, first request to last); for the late join also ``decision_s`` (every critic rank
done to decided), ``push_s`` (the wake-up and push the manager measured), ``open_s`` (pushed to the first request on
the critic pool; the balancer's ``open`` call alone is ``open_call_s``), ``push_estimate_s`` (what the decision
weighed a join against), the ``forecast`` and what ``happened``. Times across processes are ``time.monotonic``
(one clock on one Linux machine).

    .venv/bin/python benchmarks/control_plane.py --json benchmarks/control_plane.json   # ~17 min, 3 repetitions

Goal (issue 45; on a quiet machine, median of 3): the late-join arm never slower than ``stock`` (within 1 %) at any
size, faster than ``gate`` wherever requests were still queued when the critic's update ended, the decision and the
opening each under 1 s at 16k. Then the planner and the node choice on 16 x 8 and 128 x 8 GPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ray
from control_plane_args import control_plane_parser
from control_plane_model import PUBLISHED_LENGTHS, PUBLISHED_MEAN_TOKENS, per_server, shared_queue

from verl_split.core.errors import PlacementError
from verl_split.placement.verl_config import plan_from_config
from verl_split.runtime.overlap import deferral
from verl_split.runtime.placement.choice import check_fit
from verl_split.runtime.placement.nodes import NodeLoad, cluster_nodes
from verl_split.runtime.shared_rollout.balancer import MAX_CONCURRENCY
from verl_split.runtime.shared_rollout.balancer import actor_class as balancer_actor_class
from verl_split.runtime.shared_rollout.both_pools import BothPoolsCheckpointManager

ROOT = Path(__file__).resolve().parent.parent
#: Servers on each pool: 24 + 8 (e.g. 96 actor-pool GPUs and 32 critic-pool GPUs at rollout TP 4).
HYBRID, SHARED = 24, 8
ARMS = ("stock", "gate", "late_join", "shared_from_start")
#: The rank verl does not collect from ends this much after the collected one (a sequence-parallel mesh's).
RANK_LAG_S = 0.5


# ----------------------------------------------------------------------------- stand-ins


@ray.remote(num_cpus=0)
class GenerationSide:
    """verl's agent-loop workers and the rollout servers they send to (module docstring)."""

    def __init__(self, names: list[str], max_num_seqs: int, tokens_per_s: float) -> None:
        self.rate = tokens_per_s
        self.slots = {name: asyncio.Semaphore(max_num_seqs) for name in names}
        self.weights = dict.fromkeys(names, -1)

    def set_weights(self, names: list[str], step: int) -> None:
        for name in names:
            self.weights[name] = step

    async def run(self, balancer: Any, requests: list[tuple[str, float]]) -> list[tuple[str, str, int, float]]:
        """Every request at once; per request (id, server, the weights' step it ran with, when it began there)."""

        async def one(request_id: str, tokens: float) -> tuple[str, str, int, float]:
            server, _ = await balancer.acquire_server.remote(request_id=request_id)
            try:
                async with self.slots[server]:
                    began, weights = time.monotonic(), self.weights[server]
                    await asyncio.sleep(tokens / self.rate)
            finally:
                balancer.release_server.remote(server_id=server)  # verl's client does not wait for it
            return request_id, server, weights, began

        # A failed request fails the step (verl's agent loop gathers without return_exceptions).
        return await asyncio.gather(*[one(r, t) for r, t in requests])


@ray.remote(num_cpus=0)
class StandInCriticRank:
    """A synchronous critic worker, as verl's ``TrainingWorker`` is: its update a sleep."""

    def update(self, seconds: float) -> None:
        time.sleep(seconds)


class StandInManager:
    """verl's ``CheckpointEngineManager`` for one pool's servers: the sync sets their weights (after ``push_s``)."""

    def __init__(self, world: SimpleNamespace, names: list[str], push_s: float, first_rank: int = 0) -> None:
        self.world, self.names, self.push_s = world, names, push_s
        self.replicas = [
            SimpleNamespace(replica_rank=first_rank + i, server_address=name, servers=[world.generation])
            for i, name in enumerate(names)
        ]

    def update_weights(self, global_steps: int | None = None) -> None:
        time.sleep(self.push_s)
        ray.get(self.world.generation.set_weights.remote(self.names, global_steps), timeout=self.world.limit_s)

    def wake_up_replicas(self) -> None:
        pass

    def sleep_replicas(self) -> None:
        pass


# ----------------------------------------------------------------------------- one step of one arm


class Arm:
    """One arm at one size: its balancer and checkpoint manager, kept across the repetitions."""

    def __init__(self, name: str, requests: int, world: SimpleNamespace, args: argparse.Namespace) -> None:
        self.name = name
        self.hybrid = StandInManager(world, world.hybrid, push_s=0.0)
        if name == "stock":
            self.balancer, self.manager = world.stock_balancer, self.hybrid
            return
        self.balancer = world.balancer
        shared = StandInManager(world, world.shared, push_s=args.push_s, first_rank=HYBRID)
        self.trainer = SimpleNamespace(critic_wg=SimpleNamespace(workers=world.critic_ranks))
        self.manager = BothPoolsCheckpointManager(
            self.trainer,
            self.hybrid,
            shared,
            self.balancer,
            requests_per_step=requests,
            server_concurrency=args.max_num_seqs,
            late_join=name != "gate",
            ask_rate_model=args.join == "forecast",
        )
        deferral.running_update = lambda: None
        for _ in range(2):  # a run's start-up sync (cold, not kept) and the next: the push the rate model weighs
            self.manager.update_weights(0)
            self.manager.sleep_replicas()


def collect(update: Any, future: concurrent.futures.Future, limit_s: float) -> None:
    """verl's future of the critic's update: done when the collected rank returns (at most ``limit_s``)."""
    try:
        future.set_result(ray.get(update, timeout=limit_s))
    except Exception as exc:
        future.set_exception(exc)


def run_step(arm: Arm, count: int, repeat: int, step: int, world: SimpleNamespace, args: argparse.Namespace):
    """One step's generation in ``arm``; its row."""
    rate = PUBLISHED_MEAN_TOKENS / args.mean_s
    tokens = PUBLISHED_LENGTHS.draw(count, seed=1000 * repeat + count)  # the same lengths in every arm
    durations = [t / rate for t in tokens]
    requests = [(f"{arm.name}-{step}-{i}", t) for i, t in enumerate(tokens)]  # unique, as verl's request ids are
    ray.get(world.generation.set_weights.remote([*world.hybrid, *world.shared], step - 1), timeout=world.limit_s)
    alone = per_server(durations, HYBRID, args.max_num_seqs)

    # The critic's update of the step before, running on (not in the last arm: it ended before the sync).
    critic_s = args.critic_share * alone.generation_s
    collected: concurrent.futures.Future = concurrent.futures.Future()
    ranks = []
    if arm.name != "shared_from_start":
        ranks = [r.update.remote(critic_s + RANK_LAG_S * i) for i, r in enumerate(world.critic_ranks)]
        threading.Thread(target=collect, args=(ranks[0], collected, world.limit_s), daemon=True).start()
    deferral.running_update = lambda: None if not ranks or collected.done() else collected

    started = time.monotonic()
    arm.manager.update_weights(step)
    answers = ray.get(world.generation.run.remote(arm.balancer, requests), timeout=world.limit_s)
    arm.manager.sleep_replicas()
    gen_s = time.monotonic() - started
    ray.get(ranks, timeout=world.limit_s)  # the next step starts with no critic update left over

    ids = [a[0] for a in answers]
    on_critic = [a for a in answers if a[1] in world.shared]
    row: dict[str, Any] = {
        "arm": arm.name,
        "requests": count,
        "repeat": repeat,
        "gen_s": gen_s,
        "lost": count - len(set(ids)),
        "served_twice": len(ids) - len(set(ids)),
        "stale_weights": sum(1 for a in answers if a[2] != step),
        "critic_pool_share": len(on_critic) / max(len(answers), 1),
        "critic_update_s": critic_s if ranks else 0.0,
        "model_gen_s": alone.generation_s,  # verl's routing on the actor pool alone
    }
    if arm.name == "shared_from_start":
        row["model_gen_s"] = per_server(durations, HYBRID + SHARED, args.max_num_seqs, SHARED).generation_s
    if arm.name != "stock":
        row["balancer_own_s"] = arm.manager.last_account.get("own_s")
    if arm.name == "late_join":
        row |= late_join_figures(arm, durations, on_critic, args)
    return row


def late_join_figures(arm: Arm, durations: list[float], on_critic: list[tuple], args: argparse.Namespace):
    """The late join's latencies, its forecast and what happened (``manager.last_join``)."""
    join = arm.manager.last_join
    opened_after = arm.manager.last_account.get("opened_after_s")
    first_on_critic = min((a[3] for a in on_critic), default=None)
    pushed = join.marks.get("pushed")
    forecast = join.forecast
    slots = args.max_num_seqs
    return {
        "decision_s": join.decision_s,
        "push_s": join.push_s,
        "open_s": None if first_on_critic is None or pushed is None else first_on_critic - pushed,
        "open_call_s": join.open_s,
        "push_estimate_s": None if forecast is None else arm.manager.push_estimate_s,
        "forecast": None
        if forecast is None
        else {
            "pays": forecast.pays,
            "queued": forecast.left,
            "rate_per_s": forecast.rate,
            "alone_s": forecast.alone_s,
            "joined_s": forecast.joined_s,
            "critic_pool_takes": forecast.critic_pool_takes,
            "why": forecast.why,
        },
        "happened": {
            "outcome": join.outcome,
            "opened_after_s": opened_after,
            "finish_wait_s": join.finish_wait_s,
            # The event model: the critic pool opening when it did, and never.
            "model_joined_gen_s": shared_queue(durations, HYBRID * slots, SHARED * slots, opened_after).generation_s,
            "model_alone_gen_s": shared_queue(durations, HYBRID * slots).generation_s,
        },
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
    from verl.workers.rollout.router import get_router_handle

    names = [f"rollout-server-{i}" for i in range(HYBRID + SHARED)]
    rate = PUBLISHED_MEAN_TOKENS / args.mean_s
    # Room for every request of a step at once (Ray's default for an async actor is 1,000 calls).
    generation = GenerationSide.options(max_concurrency=MAX_CONCURRENCY).remote(names, args.max_num_seqs, rate)
    servers = dict.fromkeys(names, generation)
    world = SimpleNamespace(
        hybrid=names[:HYBRID],
        shared=names[HYBRID:],
        generation=generation,
        # verl's own balancer over the actor pool's servers, started as verl starts it; verl-split's over all 32,
        # started as coordinator._route_to_all starts it.
        stock_balancer=get_router_handle({n: generation for n in names[:HYBRID]}),
        balancer=balancer_actor_class().remote(servers=servers),
        critic_ranks=[StandInCriticRank.remote() for _ in range(2)],
        limit_s=args.limit_s,
    )
    actors = [generation, world.stock_balancer, world.balancer, *world.critic_ranks]
    ray.get([a.__ray_ready__.remote() for a in actors], timeout=args.limit_s)
    # Warm: each balancer's first requests pay the processes' first calls (seconds, in the first arm run otherwise).
    for balancer in (world.stock_balancer, world.balancer):
        warm = [(f"warm-{id(balancer)}-{i}", 1.0) for i in range(min(1024, *args.requests))]
        ray.get(generation.run.remote(balancer, warm), timeout=args.limit_s)
    ray.get(world.balancer.take_step.remote(), timeout=args.limit_s)
    return world


def spread(values: list[float]) -> dict[str, float] | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(rows: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    """Per size: each arm's generation, its cost against ``stock`` (paired by repetition), the late join's
    latencies; and the goal, checked."""
    per: dict[int, Any] = {}
    goals: dict[str, Any] = {"never_slower_than_stock": {}, "faster_than_gate_where_queued": {}, "latencies_16k": {}}
    for count in counts:
        mine = [r for r in rows if r["requests"] == count]
        by_arm = {arm: [r for r in mine if r["arm"] == arm] for arm in ARMS}
        stock = {r["repeat"]: r["gen_s"] for r in by_arm["stock"]}
        figures: dict[str, Any] = {}
        for arm, arm_rows in by_arm.items():
            figures[arm] = {
                "gen_s": spread([r["gen_s"] for r in arm_rows]),
                "against_stock": spread(
                    [r["gen_s"] / stock[r["repeat"]] - 1 for r in arm_rows if r["repeat"] in stock]
                ),
                "critic_pool_share": spread([r["critic_pool_share"] for r in arm_rows]),
                "lost_twice_stale": [sum(r[k] for r in arm_rows) for k in ("lost", "served_twice", "stale_weights")],
            }
        late = by_arm["late_join"]
        for key in ("decision_s", "push_s", "open_s", "open_call_s"):
            figures["late_join"][key] = spread([r.get(key) for r in late])
        figures["late_join"]["outcomes"] = [r["happened"]["outcome"] for r in late]
        per[count] = figures
        median = {arm: figures[arm]["gen_s"]["median"] for arm in ARMS if figures[arm]["gen_s"]}
        if "late_join" in median and "stock" in median:
            ratio = median["late_join"] / median["stock"]
            goals["never_slower_than_stock"][count] = {"late_join_over_stock": ratio, "met": ratio <= 1.01}
        queued = [r["forecast"]["queued"] for r in late if r.get("forecast")]
        if queued and statistics.median(queued) > 0 and "gate" in median:
            goals["faster_than_gate_where_queued"][count] = {
                "queued_when_the_update_ended": statistics.median(queued),
                "late_join_over_gate": median["late_join"] / median["gate"],
                "met": median["late_join"] < median["gate"],
            }
    largest = per[max(counts)]["late_join"]
    for key in ("decision_s", "open_s"):
        value = largest[key]["median"] if largest[key] else None
        goals["latencies_16k"][key] = {"median": value, "met": value is not None and value < 1.0}
    return {"per_requests": per, "goals": goals}


def late_join_line(row: dict[str, Any]) -> str:
    if row["arm"] != "late_join":
        return ""
    parts = [f"{row['happened']['outcome']}"]
    if row["decision_s"] is not None:
        parts.append(f"decided {row['decision_s']:.3f}s after the ranks ({row['forecast']['why']})")
    if row["push_s"] is not None:
        parts.append(f"pushed in {row['push_s']:.2f}s")
    if row["open_s"] is not None:
        parts.append(f"first request on the critic pool {row['open_s']:.3f}s later")
    return "; late join: " + ", ".join(parts)


def print_summary(summary: dict[str, Any], repeats: int) -> None:
    for count, figures in summary["per_requests"].items():
        cells = []
        for arm in ARMS:
            gen, cost = figures[arm]["gen_s"], figures[arm]["against_stock"]
            cells.append(
                f"{arm} {gen['median']:.2f}s [{gen['min']:.2f}-{gen['max']:.2f}]"
                + ("" if arm == "stock" else f" {cost['median']:+.2%} [{cost['min']:+.2%}, {cost['max']:+.2%}]")
            )
        print(f"{count:>6} requests, {repeats} repetition(s), generation and against stock: " + "; ".join(cells))
        late = figures["late_join"]
        print(
            "       late join: "
            + ", ".join(
                f"{key} {late[key]['median']:.3f}s [{late[key]['min']:.3f}-{late[key]['max']:.3f}]"
                for key in ("decision_s", "push_s", "open_s", "open_call_s")
                if late[key]
            )
            + f"; {', '.join(late['outcomes'])}; critic pool took {late['critic_pool_share']['median']:.1%}"
        )
    print("goals: " + json.dumps(summary["goals"]))


def main(argv: list[str] | None = None) -> int:
    parser = control_plane_parser(__doc__, repeats=3)
    parser.add_argument(
        "--mean-s", type=float, default=6.0, help="a mean response's seconds on a server (the lengths' scale)"
    )
    parser.add_argument("--push-s", type=float, default=1.0, help="the critic pool's wake-up and push")
    parser.add_argument(
        "--critic-share", type=float, default=0.3, help="the critic's update, as a share of the modelled generation"
    )
    parser.add_argument(
        "--join",
        choices=("forecast", "always"),
        default="forecast",
        help="the late join asks the rate model (forecast), or joins whenever the critic's update ends first (always)",
    )
    parser.add_argument("--limit-s", type=float, default=600.0, help="the most any one wait may take")
    parser.add_argument("--no-planner", action="store_true", help="skip the planner's rows")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()  # a benchmark wants a quiet machine: the JSON says how quiet it was
    began = time.monotonic()
    # A cluster of its own ("local"), never one another process started in the same Ray folder.
    ray.init(address="local", num_cpus=8, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    running_update = deferral.running_update
    rows: list[dict[str, Any]] = []
    try:
        world = start_world(args)
        arms: dict[tuple[str, int], Arm] = {}
        step = 1
        for repeat in range(args.repeats):
            for count in args.requests:
                order = ARMS[repeat % len(ARMS) :] + ARMS[: repeat % len(ARMS)]  # no arm always first
                for name in order:
                    if (name, count) not in arms:
                        arms[name, count] = Arm(name, count, world, args)
                    step += 1
                    row = run_step(arms[name, count], count, repeat, step, world, args)
                    rows.append(row)
                    print(
                        f"{count:>6} requests, {name:>17}: generation {row['gen_s']:6.2f}s (model "
                        f"{row['model_gen_s']:.2f}s), critic pool {row['critic_pool_share']:.1%}"
                        + late_join_line(row)
                        + f"; lost {row['lost']}, twice {row['served_twice']}, stale {row['stale_weights']}",
                        flush=True,
                    )
    finally:
        deferral.running_update = running_update
        ray.shutdown()
    planner = [] if args.no_planner else planner_rows(args.repeats)
    for row in planner:
        print(
            f"planner: {row['gpus']} GPUs ({row['nodes']} nodes) planned in {row['plan_s'] * 1000:.1f} ms (max "
            f"{row['plan_s_max'] * 1000:.1f}), refused with suggestions in {row['refuse_s'] * 1000:.1f} ms, nodes "
            f"chosen in {row['choose_s'] * 1000:.1f} ms; pools {row['pools']}"
        )
    summary = summarise(rows, args.requests)
    print_summary(summary, args.repeats)
    print(f"the whole run: {time.monotonic() - began:.0f}s")
    if args.json:
        lengths = PUBLISHED_LENGTHS
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "lengths": {
                        "lognormal_mu": lengths.mu,
                        "lognormal_sigma": lengths.sigma,
                        "cap_tokens": lengths.cap,
                        "mean_tokens": PUBLISHED_MEAN_TOKENS,
                        "source": "step 1 of tests/support/data/deepseek7b_megatron_ppo_4gpu.log (control_plane_model)",
                    },
                    "steps": rows,
                    "summary": summary,
                    "planner": planner,
                    "run_s": time.monotonic() - began,
                    "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
