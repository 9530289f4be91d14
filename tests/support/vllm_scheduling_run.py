"""Longest-first admission and migrate on join on two real vLLM servers on the CPU, without a trainer (the vLLM tier's
tests/on_vllm/test_vllm_migration.py runs this in a process of its own and reads the JSON it writes).

Why no trainer: a move needs verl's resuming client (``FullyAsyncLLMServerClient``), which verl 0.9.1's synchronous
trainers never use (they take ``LLMServerClient``, which hands an aborted request back cut), and the request id
passed through to vLLM, which verl's clients do only under ``rollout.full_determinism``; in a training run that flag
also sets ``VLLM_BATCH_INVARIANT=1`` (``main_ppo.run_ppo``, the server's ``__init__``), whose kernels are Triton's
(vLLM's ``batch_invariant.py``), and vLLM's CPU build disables Triton. verl-split does not switch migrate on join on
in a training run either (``migration.py``). So here the pieces a run would use are put together by hand: verl's own
vLLM replicas (``vLLMReplica.init_standalone``, recording what they are asked: ``vllm_recording.py``), verl-split's
balancer, and verl's resuming client, its config passing the request id through (the servers' config leaves
``full_determinism`` off).

Replica 0 stands for the actor pool (``actor0``), replica 1 for the critic pool (``critic0``), parked until it
joins. Every decision is forced: the engine hold (``vllm_hold.py``) stops the actor pool's engine while the test
acts, and the admission order's predictions are given (``learn_lengths``, a last epoch's).

    python tests/support/vllm_scheduling_run.py MODEL_DIR OUT_DIR     # writes OUT_DIR/scheduling.json
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import ray

ACTOR, CRITIC = "actor0", "critic0"
#: Every response's tokens (vLLM ignores end-of-sequence: a response is whole at exactly this many).
RESPONSE = 24
#: The migration's requests each have this many tokens or more when the actor pool's engine is held.
HOLD_AT = 3
#: Requests of the migration, and how many move.
MIGRATING, MOVES = 4, 2
#: The weights' version both pools hold once the push has landed, and the critic pool's before it.
VERSION, STALE = 3, 2
#: The admission part: each prompt's predicted length (a last epoch's, given); the request that finds the slot
#: on arrival runs first, the rest wait in the balancer and must start longest predicted first.
PREDICTED = [3.0, 9.0, 1.0, 7.0, 5.0]
POLL_S = 0.05


def prompt(i: int) -> list[int]:
    return [11 + i, 23, 37 + 2 * i, 41, 53 + i]


def rollout_config():
    from verl.workers.config.rollout import RolloutConfig

    return RolloutConfig(
        name="vllm",
        tensor_model_parallel_size=1,
        n_gpus_per_node=2,
        nnodes=1,
        dtype="float32",
        prompt_length=16,
        response_length=RESPONSE,
        max_model_len=64,
        max_num_seqs=8,
        ignore_eos=True,
        enforce_eager=True,
        enable_sleep_mode=False,  # vLLM's CPU build has none (verl_split/dryrun/recipe.py)
        load_format="auto",  # a standalone server loads the model's own weights
        engine_kwargs={"vllm": {"logits_processors": ["support.vllm_hold:HoldAtTokens"]}},
    )


async def until(check) -> Any:
    """Poll ``check`` (a coroutine function) until it returns something true; the test's timeout bounds it."""
    while not (found := await check()):
        await asyncio.sleep(POLL_S)
    return found


async def held(folder: Path) -> list[int]:
    return json.loads((await until(lambda: _exists(folder / "held"))).read_text())


async def _exists(path: Path) -> Path | None:
    return path if path.exists() else None


def arm(folder: Path, requests: int, tokens: int, release: str) -> None:
    (folder / "held").unlink(missing_ok=True)
    (folder / "hold").write_text(f"{requests} {tokens} {release}")


async def admission(client, balancer, servers, folder: Path) -> dict[str, Any]:
    """Five requests for one slot of the actor pool's server: the first takes it and is held in the engine until the
    other four wait in the balancer; then they start, one at a time, in the admission order."""
    await balancer.learn_lengths.remote([(prompt(i), length) for i, length in enumerate(PREDICTED)])
    await balancer.gate.remote([CRITIC], {ACTOR: 1})
    arm(folder, 1, 1, "release-admission")
    calls = [
        asyncio.ensure_future(client.generate(f"a{i}", prompt_ids=prompt(i), sampling_params={"logprobs": True}))
        for i in range(len(PREDICTED))
    ]
    await held(folder)

    async def all_queued():
        return (await balancer.progress.remote())["queued"] == len(PREDICTED) - 1

    await until(all_queued)  # the other four wait in the balancer
    (folder / "release-admission").touch()
    outputs = await asyncio.gather(*calls)
    await balancer.ungate.remote()
    record = await servers[ACTOR].record.remote()
    step = await balancer.take_step.remote()
    return {
        "predicted": {f"a{i}": length for i, length in enumerate(PREDICTED)},
        "arrived": [r for r in record["arrived"] if r.startswith("a")],
        "lengths": [len(o.token_ids) for o in outputs],
        "routed": step["routed"],
    }


async def migration(client, balancer, servers, folder: Path) -> dict[str, Any]:
    """Four requests on the actor pool's server, held once each has ``HOLD_AT`` tokens; a migration to the critic
    pool's server on other weights (refused), then on the same (two move); then the engine goes on."""
    from verl_split.runtime.shared_rollout.migration import VLLM_SERVER_CALLS, MigrationRefused, migrate

    ids = [f"m{i}" for i in range(MIGRATING)]
    await asyncio.gather(
        servers[ACTOR].set_global_steps.remote(VERSION), servers[CRITIC].set_global_steps.remote(STALE)
    )
    await balancer.gate.remote([CRITIC], {})
    arm(folder, MIGRATING, HOLD_AT, "release-migration")
    calls = [
        asyncio.ensure_future(
            client.generate(request_id, prompt_ids=prompt(10 + i), sampling_params={"logprobs": True})
        )
        for i, request_id in enumerate(ids)
    ]
    held_counts = await held(folder)

    async def delivered():
        counts = await servers[ACTOR].tokens_so_far.remote(ids)
        return counts if len(counts) == MIGRATING and min(counts.values()) >= HOLD_AT else None

    before = await until(delivered)  # each request's tokens so far reached the server
    await balancer.open.remote([CRITIC])
    refused = None
    try:
        await migrate(balancer, servers, [ACTOR], [CRITIC], MOVES, calls=VLLM_SERVER_CALLS)
    except MigrationRefused as error:
        refused = str(error)
    after_refusal = await servers[ACTOR].tokens_so_far.remote(ids)
    await servers[CRITIC].set_global_steps.remote(VERSION)
    running, _ = await balancer.running_requests.remote()
    moves = await migrate(balancer, servers, [ACTOR], [CRITIC], MOVES, calls=VLLM_SERVER_CALLS)
    (folder / "release-migration").touch()
    outputs = await asyncio.gather(*calls)
    records = {name: await server.record.remote() for name, server in servers.items()}
    step = await balancer.take_step.remote()
    return {
        "prompts": {request_id: prompt(10 + i) for i, request_id in enumerate(ids)},
        "held_counts": held_counts,
        "before": before,
        "refused": refused,
        "after_refusal": after_refusal,
        "started": {request_id: started for request_id, (_, started) in running.items()},
        "moves": [[m.request_id, m.source, m.target] for m in moves],
        "outputs": {
            request_id: {
                "token_ids": list(o.token_ids),
                "log_probs": len(o.log_probs or []),
                "stop_reason": o.stop_reason,
                "min_global_steps": o.extra_fields.get("min_global_steps"),
                "max_global_steps": o.extra_fields.get("max_global_steps"),
            }
            for request_id, o in zip(ids, outputs, strict=True)
        },
        "served": {name: [s for s in r["served"] if s["request_id"] in ids] for name, r in records.items()},
        "routed": step["routed"],
    }


async def scenario(model: str, folder: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from support.vllm_recording import RecordingReplica
    from verl.workers.config.model import HFModelConfig
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

    from verl_split.runtime.shared_rollout.balancer import actor_class

    model_config = HFModelConfig(path=model)
    replicas = [
        RecordingReplica(replica_rank=rank, config=rollout_config(), model_config=model_config, gpus_per_node=2)
        for rank in range(2)
    ]
    await asyncio.gather(*[replica.init_standalone() for replica in replicas])
    servers = {ACTOR: replicas[0].server_handle, CRITIC: replicas[1].server_handle}
    balancer = actor_class().remote(servers=servers)
    # The request id passed through to vLLM (``full_determinism``): what a move names; the client's config only.
    client_config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"full_determinism": True, "name": "vllm", "response_length": RESPONSE}}}
    )
    client = FullyAsyncLLMServerClient(config=client_config, load_balancer_handle=balancer)
    return {
        "admission": await admission(client, balancer, servers, folder),
        "migration": await migration(client, balancer, servers, folder),
    }


def main(model: str, out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["VLLM_HOLD_DIR"] = str(folder)
    # Logical CPUs: verl asks for several a bundle (max_colocate_count), and each server actor for one to start.
    ray.init(address="local", num_cpus=16, num_gpus=2, include_dashboard=False)  # never another run's cluster
    try:
        result = asyncio.run(scenario(model, folder))
    finally:
        ray.shutdown()
    (folder / "scheduling.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
