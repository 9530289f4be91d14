"""Does the rollout watchdog stay quiet at 16k requests in flight, and do the balancer's control calls answer?

16,384 requests over 8 rollout servers that each hold verl's 1,000 request slots (the server actor's concurrency
group, ``max(1000, max_num_seqs + ...)`` in verl 0.9.1), every request held in generation, and 16,384 acquires
waiting in verl-split's real balancer (the Ray actor a run starts, ``balancer.actor_class()``). Then:

* the watchdog's check (``watchdog.Watch.check``: each server's state in Ray's actor table, the balancer's
  progress under its deadline), several times: it must report nothing, every server being alive;
* what the old probe saw: one ``__ray_ready__`` to a server whose every slot is taken, answered within 10 s or not
  (the watchdog before issue 52 counted a server dead when it was not);
* the balancer's control calls while every acquire waits: ``progress`` and ``open`` (their own concurrency group);
* then the gate and the generations are released: every request and acquire ends.

What stands in: the servers (``held_servers.py``: a Ray async actor each, ``generate`` waiting on one shared gate
actor), the trainer's manager (the replicas the watchdog reads). One driver submits the requests, the acquires and
the control calls (in a run the agent-loop workers send the requests and the trainer the control calls), so a
control call sent while acquires are still being submitted queues behind them in the driver's own submission queue:
the control calls are timed once every acquire is in the balancer's queue.

    .venv/bin/python benchmarks/watchdog_scale.py --json benchmarks/watchdog_scale.json     # ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import ray
from held_servers import by_address, start_held_servers, watched_manager

from verl_split.runtime.shared_rollout import watchdog
from verl_split.runtime.shared_rollout.balancer import actor_class


def timed(call) -> tuple[Any, float]:
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16384)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--slots", type=int, default=1000, help="each server's request slots (verl's group size)")
    parser.add_argument("--checks", type=int, default=5, help="watchdog checks while every request is held")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    # Ray's workers import the stand-in servers' module by name, as this script does.
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), *sys.path])}
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": env})
    try:
        gate, servers = start_held_servers(args.servers, slots=args.slots, waiting=args.requests + 100)
        names = list(by_address(servers))
        balancer = actor_class().remote(servers=by_address(servers))
        ray.get(balancer.gate.remote(parked=names, caps={}))  # every acquire waits in the balancer's queue
        requests = [servers[i % len(servers)].generate.remote(i) for i in range(args.requests)]
        acquires = [balancer.acquire_server.remote(request_id=f"r{i}") for i in range(args.requests)]
        while ray.get(balancer.progress.remote())["queued"] < args.requests:
            time.sleep(1.0)
        progress, progress_s = timed(lambda: ray.get(balancer.progress.remote()))
        manager = watched_manager(servers, balancer, actor_pool=len(servers) // 2)
        watch = watchdog.Watch(manager, limit_s=1800.0, probe_s=1.0)
        checks = [timed(watch.check) for _ in range(args.checks)]
        reported = [str(found) for found, _ in checks if found is not None]
        answered, _ = ray.wait([servers[0].__ray_ready__.remote()], timeout=10)
        _, open_s = timed(lambda: ray.get(balancer.open.remote(names)))
        _, drain_s = timed(lambda: (ray.get(gate.open.remote()), ray.get(requests), ray.get(acquires)))
    finally:
        ray.shutdown()
    figures = {
        "requests": args.requests,
        "servers": args.servers,
        "slots": args.slots,
        "watchdog_checks_s": [round(seconds, 4) for _, seconds in checks],
        "watchdog_reported": reported,
        "old_probe_answered_within_10_s": bool(answered),
        "queued": progress["queued"],
        "progress_call_s": round(progress_s, 4),
        "open_call_s": round(open_s, 4),
        "drain_s": round(drain_s, 2),
    }
    print(f"{args.requests} requests held on {args.servers} servers of {args.slots} slots, all acquires queued:")
    print(f"  watchdog checks: {figures['watchdog_checks_s']} s, reported: {reported or 'nothing'}")
    print(f"  the old probe (__ray_ready__) answered within 10 s: {figures['old_probe_answered_within_10_s']}")
    print(f"  balancer control calls: progress {progress_s * 1000:.0f} ms, open {open_s * 1000:.0f} ms")
    print(f"  released: every request and acquire ended in {drain_s:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 1 if reported else 0


if __name__ == "__main__":
    sys.exit(main())
