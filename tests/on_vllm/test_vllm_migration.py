"""Generation's tail on the real vLLM (vLLM's CPU build): longest-first admission and migrate on join, end to end on
two of verl's own vLLM servers, verl-split's balancer and verl's resuming client (``FullyAsyncLLMServerClient``).

Not in a training run: verl-split does not switch migrate on join on in one; verl 0.9.1's synchronous trainers use
the client that does not resume; and the request id a move names reaches vLLM only under
``rollout.full_determinism``, which in a run also switches on vLLM's batch-invariant kernels (Triton's, disabled in
vLLM's CPU build). ``tests/support/vllm_scheduling_run.py`` puts the pieces together instead, in a process of its
own (about 90 s on 2 cores, both servers' start-up included); this file checks what it wrote.

Every decision is forced: the actor pool's engine is held inside vLLM (a logits processor waiting for a file,
``tests/support/vllm_hold.py``) while the balancer queues or the migration moves, and the admission order's
predictions are given. What is checked:

- **admission**: with one slot, the request that took it on arrival runs first; the four that waited in the
  balancer start longest predicted first; every response whole;
- **migrate on join**: with the critic pool's server on other weights the migration is refused and nothing is
  aborted; on the same weights the two requests running longest on the actor pool's server are aborted there (each
  once) and resumed on the joiner with their prompt + the tokens they had, the rest generated there; every
  response whole (its tokens and rollout log-probs), on one weight version; none lost, none twice. Exact in
  distribution, not bit for bit: the joiner samples the rest with its own random numbers (vLLM's sampler), so no
  check compares a moved response with the one it would have been.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import ROOT, TESTS
from support.vllm_runs import vllm_assets
from support.vllm_scheduling_run import HOLD_AT, MOVES, RESPONSE, STALE, VERSION

from verl_split.dryrun import shm

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

#: The longest the run may take: two vLLM servers starting on 2 busy cores, and 15 short requests.
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def scheduling(tmp_path_factory):
    assets = vllm_assets(tmp_path_factory.mktemp("vllm_assets"))
    out = tmp_path_factory.mktemp("vllm_scheduling")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VERL_SPLIT", "SLOW_"))},
        "VERL_SPLIT_CPU": "1",
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "RAY_prestart_worker_first_driver": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    before = shm.snapshot()
    try:
        finished = subprocess.run(
            [sys.executable, str(TESTS / "support" / "vllm_scheduling_run.py"), str(assets.model), str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    finally:
        shm.remove_left(before)  # vLLM's message queues outlive its processes
    log = (finished.stdout + finished.stderr)[-6000:]
    assert finished.returncode == 0, log
    return json.loads((out / "scheduling.json").read_text())


def test_requests_waiting_in_the_balancer_start_longest_predicted_first(scheduling):
    admission = scheduling["admission"]
    first, *waited = admission["arrived"]
    predicted = admission["predicted"]
    assert sorted(admission["arrived"]) == sorted(predicted), "each request reached the server once"
    assert waited == sorted(waited, key=lambda r: -predicted[r]), (first, waited, predicted)
    assert admission["lengths"] == [RESPONSE] * len(predicted)
    assert admission["routed"] == {"actor0": len(predicted)}


def test_a_joiner_on_other_weights_refuses_the_migration_before_aborting_anything(scheduling):
    migration = scheduling["migration"]
    assert migration["refused"] is not None
    assert f"critic0: {STALE}" in migration["refused"] and f"actor0: {VERSION}" in migration["refused"]
    assert set(migration["after_refusal"]) == set(migration["prompts"]), "every request still runs on actor0"


def test_migrate_on_join_moves_the_longest_running_once_with_their_prefix_and_loses_none(scheduling):
    migration = scheduling["migration"]
    started = migration["started"]
    moved = {request_id for request_id, _, _ in migration["moves"]}
    assert len(moved) == MOVES and {(s, t) for _, s, t in migration["moves"]} == {("actor0", "critic0")}
    assert moved == set(sorted(started, key=started.get)[:MOVES]), "the longest running were chosen"
    served = migration["served"]
    for request_id, prompt in migration["prompts"].items():
        output = migration["outputs"][request_id]
        on_actor = [s for s in served["actor0"] if s["request_id"] == request_id]
        on_critic = [s for s in served["critic0"] if s["request_id"] == request_id]
        assert len(output["token_ids"]) == RESPONSE and output["log_probs"] == RESPONSE, request_id
        assert output["min_global_steps"] == output["max_global_steps"] == VERSION, output
        (head,) = on_actor
        assert head["prompt_ids"] == prompt
        if request_id not in moved:
            assert on_critic == [] and head["stop_reason"] == "completed", request_id
            assert head["token_ids"] == output["token_ids"]
            continue
        (tail,) = on_critic  # moved once
        assert head["stop_reason"] == "aborted" and len(head["token_ids"]) >= HOLD_AT, head
        assert tail["prompt_ids"] == prompt + head["token_ids"], "resumed with its prompt and the tokens so far"
        assert output["token_ids"] == head["token_ids"] + tail["token_ids"], "the response is both parts, whole"
        assert tail["global_steps"] == head["global_steps"] == VERSION
    assert migration["routed"] == {"actor0": len(migration["prompts"]), "critic0": MOVES}, "none lost or twice"
