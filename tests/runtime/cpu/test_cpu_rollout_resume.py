"""The CPU rollout samples after a resume what it sampled at the same step without one.

A resumed run's server is a fresh process: it has seen one weight sync (the restored step's
weights), where the uninterrupted run's server has seen one per step. Its sampling must depend on
what the checkpoint restores -- the global step verl passes with a sync, or on 0.7 (which passes
none to the rollout) the weights themselves -- not on how many syncs the process has seen.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from verl_split.runtime.cpu.rollout import CPUGenerationServer

pytestmark = pytest.mark.unit

PROMPT = [257, 84, 82, 68, 81, 198, 18, 10, 19, 29, 258, 198, 257, 64, 82, 82, 72, 82, 83, 64, 77, 83, 198]
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}


def _server(tiny_assets) -> CPUGenerationServer:
    config = SimpleNamespace(response_length=8, dtype="float32", max_model_len=64)
    model_config = SimpleNamespace(path=str(tiny_assets.model), override_config={"attn_implementation": "sdpa"})
    return CPUGenerationServer(config, model_config, replica_rank=0)


def _weights(server: CPUGenerationServer, seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in server.model.state_dict().items()}
    if "lm_head.weight" in state:  # tied to the embedding
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def _answers(server: CPUGenerationServer, n: int = 4) -> list[tuple[list[int], list[float]]]:
    outs = [asyncio.run(server.generate(f"r{i}", prompt_ids=PROMPT, sampling_params=SAMPLING)) for i in range(n)]
    return [(o.token_ids, o.log_probs) for o in outs]


@pytest.mark.parametrize("steps", [(0, 1, 2), (None, None, None)], ids=["global_step", "no_step_0.7"])
def test_a_fresh_server_at_a_restored_step_samples_as_the_long_running_one(tiny_assets, steps):
    whole, resumed = _server(tiny_assets), _server(tiny_assets)
    w = [_weights(whole, seed) for seed in (1, 2, 3)]
    for state, step in zip(w, steps, strict=True):  # the uninterrupted run: a sync per step
        asyncio.run(whole.update_weights(state, global_steps=step))
        last = _answers(whole)
    asyncio.run(resumed.update_weights(w[-1], global_steps=steps[-1]))  # the resumed run: one sync
    assert _answers(resumed) == last


def test_repeated_requests_of_one_prompt_differ_and_a_new_step_resamples(tiny_assets):
    server = _server(tiny_assets)
    state = _weights(server, 1)
    asyncio.run(server.update_weights(state, global_steps=1))
    first = _answers(server)
    assert len({tuple(t) for t, _ in first}) > 1  # n answers per prompt are not n copies
    asyncio.run(server.update_weights(state, global_steps=2))
    assert _answers(server) != first  # same weights, another step: another sample
