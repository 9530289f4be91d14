"""Generation's tail at 1k, 4k and 16k requests: what the late join, longest-first and migrate-on-join win, beside
each step's floor. On CPU, stand-in decode servers, verl's and verl-split's real balancers and verl's real client.

One step's generation on 24 actor-pool and 8 critic-pool stand-in servers (``control_plane_server.py``: per-token
latency from a published vLLM decode curve, ``max_num_seqs`` running at once, abort and resume), every request sent
at once through verl's ``FullyAsyncLLMServerClient`` (the client that resumes an aborted request with its prefix),
in five arms:

1. ``verl``: verl's own balancer (``get_router_handle``) over the actor pool's servers alone;
2. ``late_join``: verl-split's balancer, every server capped at ``max_num_seqs + 1`` (the runtime's
   ``caps_for_late_join``), the rest queued in the balancer in arrival order (``VERL_SPLIT_TAIL=verl``); the critic
   pool opens at ``--join-share`` of the ``verl`` arm's generation (the critic's update ending then: forced, not the
   rate model's decision);
3. ``longest_first``: the same, the queue in longest-predicted-first order, the predictions the step's own lengths
   (as the same prompts' last epoch would give them if lengths repeated exactly: the order's upper bound);
4. ``migrate``: ``longest_first``, and at the join the ``--moves-per-server`` longest-running requests per critic-pool
   server move from the busiest actor-pool servers (``migration.py``);
5. ``shared_from_start``: verl-split's balancer ungated over all 32 from the first request (the bound of a join).

Response lengths: ``control_plane_model.PUBLISHED_LENGTHS`` (a lognormal fitted to a published verl run, capped at
its ``max_response_length``). Per step (``--json`` rows): ``gen_s`` (first request sent to last answer), the floor
from the servers' own logs (``floor.py``: ``floor_s``, ``tail_floor_s``, ``work_floor_s``, ``over_floor``,
``tail_batch``) and its ``advice``, ``lost``/``served_twice``/``stale_weights``, ``critic_pool_share``; for the join
arms ``open_call_s`` (the balancer's ``open`` answered, with every request in its queue or in flight) and for
``migrate`` ``migrate_call_s`` and ``moved``.

**Sizes, chosen so that each arm measures decoding.** On a 2-core machine the harness starts a request in about
2.5 ms (the client's acquire, generate and release calls, the balancer's two, the server's one: Ray's per-call
cost), so 16,384 requests take about 40 s to send, 1,024 about 2.5 s. At the old ``--scale 0.05`` a 1,024-request
step decoded for 0.4 s (its servers at a batch of 2, the requests trickling in) and each arm measured Ray, 2.6 to 4
times its floor. At ``--scale 0.5`` verl's routing decodes for about 3.9 s at 1k, 13 s at 4k and 50 s at 16k (the
stand-in curve with the drawn lengths, 24 servers of 256 seats): more than the sending at every size, so the decode
is most of each step and the floor is what the arms are held to. Two repetitions (``--repeats 2``: the spread
beside each median) keep the whole default run at about 17 minutes on a quiet 2-core machine, an estimate (start
and warm-up about 2.5 minutes, measured; five arms of 1k + 4k + 16k about 7 minutes a repetition, from the decode
times above and the sending); three would take about 24.

**What the joiners take, and why migration moves little at 16k.** The caps are the runtime's: ``max_num_seqs + 1``
on every server. At 1k and 4k every request fits under the actor pool's caps (24 x 257), so nothing waits in the
balancer: the critic pool takes only the requests still to arrive when it opens, and the requests moved at the join
decode there at a small batch. At 16k about 10k wait; at the open the joiners fill to their caps at once, so a moved
request decodes at the same batch of 256 as where it came from: the move costs its resume and wins nothing, which the
floor's advice says. The moves are the ``--moves-per-server`` longest-running requests (the earliest started) of the
busiest servers, chosen when ``open`` has answered; a request that ends before its abort arrives is not moved, which
at the old scale (a 512-token response decoded in under a second) was every chosen one.

    .venv/bin/python benchmarks/control_plane_tail.py --json benchmarks/control_plane_tail.json

Wants a quiet machine (it says the load average in the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ray
from control_plane_args import control_plane_parser
from control_plane_model import PUBLISHED_LENGTHS
from control_plane_server import StandInDecodeServer

from verl_split.runtime.shared_rollout.balancer import MAX_CONCURRENCY, caps_for_late_join
from verl_split.runtime.shared_rollout.balancer import actor_class as balancer_actor_class
from verl_split.runtime.shared_rollout.floor import StepLedger, advice
from verl_split.runtime.shared_rollout.migration import migrate

ARMS = ("verl", "late_join", "longest_first", "migrate", "shared_from_start")
#: rollout.n: a prompt's samples (siblings) share its tokens.
SAMPLES_PER_PROMPT = 16


@ray.remote(num_cpus=0)
class Clients:
    """verl's agent-loop workers: every request of the step at once, each through verl's resuming client.

    One client per balancer, kept across steps as a training run keeps its own: a fresh one asks the balancer for
    its fields once per request in flight before the first answer comes (two calls each, thousands at 16k)."""

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}

    async def run(self, balancer: Any, requests: list[tuple[str, list[int], int]], response_length: int):
        from omegaconf import OmegaConf
        from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

        key = balancer._actor_id.hex()
        if key not in self._clients:
            # full_determinism: the request id reaches the server, so abort_request can name it (migration.py).
            rollout = {"full_determinism": True, "name": "vllm", "response_length": response_length}
            self._clients[key] = FullyAsyncLLMServerClient(
                config=OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}}), load_balancer_handle=balancer
            )
        client = self._clients[key]

        async def one(request_id: str, prompt_ids: list[int], length: int):
            params = {"length": length, "prompt_length": len(prompt_ids), "token_ids": False}
            output = await client.generate(request_id, prompt_ids=prompt_ids, sampling_params=params)
            fields = output.extra_fields
            return request_id, len(output.token_ids), fields["min_global_steps"], fields["max_global_steps"]

        return await asyncio.gather(*[one(*r) for r in requests])


def start_world(args: argparse.Namespace) -> dict[str, Any]:
    from verl.workers.rollout.router import get_router_handle

    names = [f"server-{i}" for i in range(args.hybrid + args.shared)]
    servers = {
        n: StandInDecodeServer.options(max_concurrency=MAX_CONCURRENCY).remote(
            n, scale=args.scale, max_num_seqs=args.max_num_seqs
        )
        for n in names
    }
    hybrid, shared = names[: args.hybrid], names[args.hybrid :]

    def ours(order: str):
        cls = balancer_actor_class()
        return cls.remote(servers=servers, admission_order=order)

    # One actor per order (each arm sets its gate before its step): fewer processes on a small machine.
    arrival, longest = ours("verl"), ours("longest_first")
    balancers = {
        "verl": get_router_handle({n: servers[n] for n in hybrid}),
        "late_join": arrival,
        "longest_first": longest,
        "migrate": longest,
        "shared_from_start": arrival,
    }
    clients = Clients.options(max_concurrency=MAX_CONCURRENCY).remote()
    ray.get([a.__ray_ready__.remote() for a in [*servers.values(), *balancers.values(), clients]])
    return {"servers": servers, "hybrid": hybrid, "shared": shared, "balancers": balancers, "clients": clients}


def requests_for(count: int, seed: int, step: int) -> list[tuple[str, list[int], int]]:
    """The step's requests: ids fresh each step, as verl's agent loops make them (a uuid per sample): an id seen in
    an earlier step would stick to that step's server (verl's sticky sessions), past the gate's caps and queue."""
    lengths = PUBLISHED_LENGTHS.draw(count, seed=seed)
    prompts = [[1000 + i // SAMPLES_PER_PROMPT, i] for i in range(count)]
    return [(f"s{step}-r{i}", prompts[i], max(1, round(t))) for i, t in enumerate(lengths)]


def floor_of(world: dict[str, Any]) -> tuple[Any, dict[str, int]]:
    """The step's floor from every server's log of the parts it ran: a moved request's parts are one request, from
    its first start to its last end (on its last server), its tokens summed; and the parts each server ran."""
    logs = ray.get([s.take_log.remote() for s in world["servers"].values()])
    named = zip(world["servers"], logs, strict=True)
    parts = sorted((start, end, rid, tokens, name) for name, log in named for rid, start, end, tokens in log)
    ledger, tokens, last_end, per_server = StepLedger(), {}, {}, {}
    for start, end, rid, count, name in parts:
        ledger.started(rid, name, start)
        ledger.ended(rid, end)
        tokens[rid], last_end[rid] = tokens.get(rid, 0) + count, end
        per_server[name] = per_server.get(name, 0) + 1
    for rid, count in tokens.items():
        ledger.ended(rid, last_end[rid], count)
    return ledger.floor(), per_server


def run_step(arm: str, count: int, repeat: int, step: int, world: dict[str, Any], args, verl_gen_s: float | None):
    servers, balancer = world["servers"], world["balancers"][arm]
    requests = requests_for(count, seed=1000 * repeat + count, step=step)
    ray.get([s.set_version.remote(step) for s in servers.values()])
    if arm != "verl":
        ray.get(balancer.take_step.remote())
    if arm in ("late_join", "longest_first", "migrate"):
        # The runtime's caps (both pools at what a server runs at once, plus one): without one on the joiners, the
        # open would hand every queued request to the critic pool's servers, to wait inside them.
        caps = caps_for_late_join(count, world["hybrid"], world["shared"], reach=1.0, concurrency=args.max_num_seqs)
        ray.get(balancer.gate.remote(parked=world["shared"], caps=caps))
    elif arm == "shared_from_start":
        ray.get(balancer.ungate.remote())
    if arm in ("longest_first", "migrate"):
        ray.get(balancer.learn_lengths.remote([(ids, length) for _, ids, length in requests]))
    row: dict[str, Any] = {"arm": arm, "requests": count, "repeat": repeat}
    started = time.monotonic()
    answers_ref = world["clients"].run.remote(balancer, requests, args.response_length)
    if arm in ("late_join", "longest_first", "migrate"):
        join_at = started + args.join_share * (verl_gen_s or 0.0)
        ray.wait([answers_ref], timeout=max(join_at - time.monotonic(), 0.0))
        t = time.monotonic()
        ray.get(balancer.open.remote(world["shared"]))
        row["open_call_s"] = time.monotonic() - t
        if arm == "migrate":
            t = time.monotonic()
            count_moves = args.moves_per_server * len(world["shared"])
            moves = asyncio.run(migrate(balancer, servers, world["hybrid"], world["shared"], count_moves))
            row["migrate_call_s"], row["moved"] = time.monotonic() - t, len(moves)
    answers = ray.get(answers_ref, timeout=args.limit_s)
    row["gen_s"] = time.monotonic() - started
    ids = [a[0] for a in answers]
    want = {rid: length for rid, _, length in requests}
    floor, per_server = floor_of(world)
    row |= {
        "lost": count - len(set(ids)) + sum(1 for a in answers if a[1] != want[a[0]]),
        "served_twice": len(ids) - len(set(ids)),
        "stale_weights": sum(1 for a in answers if a[2] != step or a[3] != step),
        "critic_pool_share": sum(per_server.get(n, 0) for n in world["shared"]) / max(sum(per_server.values()), 1),
        "floor_s": floor.floor_s,
        "tail_floor_s": floor.tail_s,
        "work_floor_s": floor.work_s,
        "over_floor": row["gen_s"] / floor.floor_s - 1,
        "tail_batch": floor.tail_batch,
        "advice": advice(floor, joiner_batch=args.moves_per_server).action,
    }
    return row


def spread(values: list[float]) -> dict[str, float] | None:
    values = [v for v in values if v is not None]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def summarise(rows: list[dict[str, Any]], counts: list[int], arms: list[str]) -> dict[str, Any]:
    per: dict[int, Any] = {}
    for count in counts:
        mine = [r for r in rows if r["requests"] == count]
        verl = {r["repeat"]: r["gen_s"] for r in mine if r["arm"] == "verl"}
        per[count] = {
            arm: {
                "gen_s": spread([r["gen_s"] for r in mine if r["arm"] == arm]),
                "over_verl": spread([r["gen_s"] / verl[r["repeat"]] for r in mine if r["arm"] == arm]),
                "floor_s": spread([r["floor_s"] for r in mine if r["arm"] == arm]),
                "over_floor": spread([r["over_floor"] for r in mine if r["arm"] == arm]),
                "open_call_s": spread([r.get("open_call_s") for r in mine if r["arm"] == arm]),
                "migrate_call_s": spread([r.get("migrate_call_s") for r in mine if r["arm"] == arm]),
                "lost_twice_stale": [
                    sum(r[k] for r in mine if r["arm"] == arm) for k in ("lost", "served_twice", "stale_weights")
                ],
            }
            for arm in arms
        }
    return per


def main(argv: list[str] | None = None) -> int:
    parser = control_plane_parser(__doc__, repeats=2)
    parser.add_argument("--hybrid", type=int, default=24, help="actor-pool servers")
    parser.add_argument("--shared", type=int, default=8, help="critic-pool servers")
    parser.add_argument("--scale", type=float, default=0.5, help="the decode curve's time scale (1: an H100's)")
    parser.add_argument("--response-length", type=int, default=512, help="rollout.response_length (the cap)")
    parser.add_argument("--join-share", type=float, default=0.3, help="the join, as a share of verl's generation")
    parser.add_argument("--moves-per-server", type=int, default=8, help="requests moved to each joining server")
    parser.add_argument("--limit-s", type=float, default=900.0, help="the most one step may take")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="the arms to run (verl first)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    load_before, began = os.getloadavg(), time.monotonic()
    here = str(Path(__file__).resolve().parent)
    env = {"PYTHONPATH": os.pathsep.join([here, *sys.path]), "PYTHONWARNINGS": "ignore"}
    ray.init(address="local", num_cpus=8, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             runtime_env={"env_vars": env})  # fmt: skip
    rows: list[dict[str, Any]] = []
    try:
        world = start_world(args)
        step = 0
        # Warm: each arm's first step pays its processes' first calls (verl's imports, the client's field query).
        warm_gen_s = None
        for arm in args.arms:
            step += 1
            row = run_step(arm, 4 * (args.hybrid + args.shared), 99, step, world, args, warm_gen_s)
            warm_gen_s = row["gen_s"] if arm == "verl" else warm_gen_s
        for repeat in range(args.repeats):
            for count in args.requests:
                verl_gen_s = None
                for arm in args.arms:  # verl first: the join's time is a share of its generation
                    step += 1
                    row = run_step(arm, count, repeat, step, world, args, verl_gen_s)
                    verl_gen_s = row["gen_s"] if arm == "verl" else verl_gen_s
                    rows.append(row)
                    print(
                        f"{count:>6} requests, {arm:>17}: generation {row['gen_s']:7.2f}s, "
                        f"floor {row['floor_s']:7.2f}s "
                        f"(tail {row['tail_floor_s']:.2f}s at a batch of {row['tail_batch']:.0f}, work "
                        f"{row['work_floor_s']:.2f}s), {row['over_floor']:+.1%} over it; critic pool "
                        f"{row['critic_pool_share']:.1%}; advice {row['advice']}"
                        + (f"; open {row['open_call_s']:.3f}s" if "open_call_s" in row else "")
                        + (f", {row['moved']} moved in {row['migrate_call_s']:.3f}s" if "moved" in row else "")
                        + f"; lost {row['lost']}, twice {row['served_twice']}, stale {row['stale_weights']}",
                        flush=True,
                    )
    finally:
        ray.shutdown()
    summary = summarise(rows, args.requests, args.arms)
    for count, figures in summary.items():
        cells = [
            f"{arm} {f['gen_s']['median']:.2f}s ({f['over_verl']['median']:.2f}x verl, "
            f"floor {f['floor_s']['median']:.2f}s)"
            for arm, f in figures.items()
        ]
        print(f"{count:>6} requests, median of {args.repeats}: " + "; ".join(cells))
    print(f"the whole run: {time.monotonic() - began:.0f}s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "steps": rows,
                    "summary": summary,
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
