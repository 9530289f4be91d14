"""Migrate on join (``migration.py``) end to end on real Ray actors: verl-split's balancer, verl's own resuming
client (``FullyAsyncLLMServerClient``, verl 0.9.1), and stand-in decode servers
(``benchmarks/control_plane_server.py``: vLLM's ``abort_request`` and a weight version; real vLLM has no CPU path
in this suite).

Six requests on two actor-pool servers, each held after 5 tokens (the servers hold them until told: the move is
made while they surely run, with no clock); the critic pool's server opens and two requests move. What is checked:
the two chosen (the longest running on the busiest servers) move once, each resumed on the joiner with its prompt +
its 5 tokens, each response whole; none lost; the stand-in's tokens depend on the prompt and position alone, so
every response is bit for bit what it would have been unmoved (on vLLM, exact in distribution only: the joiner
samples the rest with its own random numbers). With another weight version on the joiner nothing is aborted.
verl's client waits 1 s before each resume (``llm_server.py``): the test costs a few seconds.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys

import pytest
from support.paths import ROOT

#: Not in the default suite: four Ray workers each importing verl take minutes on two busy cores (a fresh clone's CI
#: run passed 180 s here), and migrate on join is not switched on in training runs; its choice, version check and
#: pinning run in the unit tier (test_migration.py). make test-extended runs it.
pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.ray,
    pytest.mark.timeout(600),
    pytest.mark.extended(reason="four Ray workers importing verl: minutes on 2 cores; the logic: test_migration.py"),
]

ray = pytest.importorskip("ray")

HYBRID, SHARED = ["h0", "h1"], ["c0"]
LENGTH, HOLD_AT = 12, 5


@pytest.fixture(scope="module")
def stand_in():
    # The stand-in's module is found by name in Ray's workers too.
    env = {"PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), *sys.path])}
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": env})
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("control_plane_server")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        ray.shutdown()


@pytest.fixture(scope="module")
def started(stand_in):
    """Three servers on weights 7 and the balancer, started once (each a Ray worker importing verl: seconds)."""
    from verl_split.runtime.shared_rollout.balancer import actor_class

    servers = {n: stand_in.StandInDecodeServer.remote(n, scale=0.1, version=7) for n in [*HYBRID, *SHARED]}
    balancer = actor_class().remote(servers=servers)
    return servers, balancer


def world(started, joiner_version: int):
    """The actor pool's servers holding requests after ``HOLD_AT`` tokens, the critic pool's parked, on its weights."""
    servers, balancer = started
    ray.get([servers[n].hold.remote(HOLD_AT) for n in HYBRID])
    ray.get(servers["c0"].set_version.remote(joiner_version))
    ray.get(balancer.gate.remote(parked=SHARED, caps={}))
    ray.get(balancer.take_step.remote())
    return servers, balancer


def client_for(balancer):
    from omegaconf import OmegaConf
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

    # full_determinism: verl passes the request id through to the server, so abort_request can name it.
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"full_determinism": True, "name": "vllm", "response_length": LENGTH}}}
    )
    return FullyAsyncLLMServerClient(config=config, load_balancer_handle=balancer)


def prompt(i: int) -> list[int]:
    return [100 + i, 7, 8, 9 + i]


async def until_held(servers, count: int) -> None:
    """Wait (without a deadline of its own: the test's timeout bounds it) until ``count`` requests are held."""
    while sum(len(s["held"]) for s in await asyncio.gather(*[servers[n].state.remote() for n in HYBRID])) < count:
        await asyncio.sleep(0.05)


def test_the_chosen_requests_move_once_resume_with_their_prefix_and_none_is_lost(stand_in, started):
    from verl_split.runtime.shared_rollout.migration import migrate

    servers, balancer = world(started, joiner_version=7)

    async def run():
        client = client_for(balancer)
        params = {"length": LENGTH, "prompt_length": 4}
        calls = [
            asyncio.ensure_future(client.generate(f"r{i}", prompt_ids=prompt(i), sampling_params=dict(params)))
            for i in range(6)
        ]
        await until_held(servers, 6)
        await balancer.open.remote(SHARED)
        moves = await migrate(balancer, servers, HYBRID, SHARED, count=2)
        for n in HYBRID:
            await servers[n].release_held.remote()
        return moves, await asyncio.gather(*calls)

    moves, outputs = asyncio.run(run())
    assert len(moves) == 2 and {m.target for m in moves} == {"c0"}
    assert {m.source for m in moves} == set(HYBRID)  # three each: one from each of the two (equally) busiest
    joiner = ray.get(servers["c0"].state.remote())
    for move in moves:
        i = int(move.request_id[1:])
        resumed = [p for r, p in joiner["calls"] if r == move.request_id]
        head = [stand_in.token_at(prompt(i), k)[0] for k in range(HOLD_AT)]
        assert resumed == [prompt(i) + head], "moved once, resumed with its prompt and the tokens so far"
        aborts = ray.get(servers[move.source].state.remote())["aborts"]
        assert aborts == [(move.request_id, False)], "aborted once, the source's prefix cache kept"
    for i, output in enumerate(outputs):
        expected = [stand_in.token_at(prompt(i), k) for k in range(LENGTH)]
        assert output.token_ids == [t for t, _ in expected], f"r{i}'s response is whole"
        assert output.log_probs == [p for _, p in expected], f"r{i}'s rollout log-probs carried across the move"
        assert output.stop_reason == "length"
        assert output.extra_fields["min_global_steps"] == output.extra_fields["max_global_steps"] == 7
    step = ray.get(balancer.take_step.remote())
    assert step["routed"] == {"h0": 3, "h1": 3, "c0": 2}  # six requests, two resumed parts: none lost or doubled


def test_a_joiner_on_other_weights_refuses_the_migration_before_aborting_anything(started):
    from verl_split.runtime.shared_rollout.migration import MigrationRefused, migrate

    servers, balancer = world(started, joiner_version=6)
    before = {n: len(ray.get(servers[n].state.remote())["aborts"]) for n in HYBRID}
    calls_before = len(ray.get(servers["c0"].state.remote())["calls"])

    async def run():
        client = client_for(balancer)
        calls = [
            asyncio.ensure_future(
                client.generate(f"r{i}", prompt_ids=prompt(i), sampling_params={"length": LENGTH, "prompt_length": 4})
            )
            for i in range(2)
        ]
        await until_held(servers, 2)
        await balancer.open.remote(SHARED)
        with pytest.raises(MigrationRefused, match="c0: 6.*h0: 7"):
            await migrate(balancer, servers, HYBRID, SHARED, count=2)
        for n in HYBRID:
            await servers[n].release_held.remote()
        return await asyncio.gather(*calls)

    outputs = asyncio.run(run())
    assert all(len(o.token_ids) == LENGTH for o in outputs)
    assert {n: len(ray.get(servers[n].state.remote())["aborts"]) for n in HYBRID} == before
    assert len(ray.get(servers["c0"].state.remote())["calls"]) == calls_before
