"""The CPU rollout's generation server, without Ray: tokens, log-probs, weight loads.

The server is the test double for vLLM/SGLang; these checks pin down what the e2e
runs rely on: its log-probs are the model's own (temperature-scaled) log-probs of
the sampled tokens, and a weight load changes what it generates.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from verl_split.runtime.cpu.rollout import CPUGenerationServer

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def server(tiny_assets):
    config = SimpleNamespace(response_length=8, dtype="float32", max_model_len=64)
    model_config = SimpleNamespace(path=str(tiny_assets.model), override_config={"attn_implementation": "sdpa"})
    return CPUGenerationServer(config, model_config, replica_rank=0)


PROMPT = [257, 84, 82, 68, 81, 198, 18, 10, 19, 29, 258, 198, 257, 64, 82, 82, 72, 82, 83, 64, 77, 83, 198]


def _full_forward_log_probs(model, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_match_a_full_forward(server, temperature):
    torch.manual_seed(0)
    params = {"temperature": temperature, "top_p": 1.0, "top_k": -1, "logprobs": True}
    out = asyncio.run(server.generate("r1", prompt_ids=PROMPT, sampling_params=params))
    assert 0 < len(out.token_ids) <= 8 and len(out.log_probs) == len(out.token_ids)
    expected = _full_forward_log_probs(server.model, PROMPT, out.token_ids, temperature)
    assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-5)


def test_greedy_is_deterministic_and_respects_max_tokens(server):
    params = {"temperature": 0, "top_p": 1.0, "top_k": -1, "max_tokens": 3}
    a = asyncio.run(server.generate("a", prompt_ids=PROMPT, sampling_params=params))
    b = asyncio.run(server.generate("b", prompt_ids=PROMPT, sampling_params=params))
    assert a.token_ids == b.token_ids and len(a.token_ids) <= 3


def test_weight_load_changes_the_policy(server):
    params = {"temperature": 0, "top_p": 1.0, "top_k": -1}
    before = asyncio.run(server.generate("x", prompt_ids=PROMPT, sampling_params=params))
    original = {k: v.clone() for k, v in server.model.state_dict().items()}
    try:
        torch.manual_seed(1)
        state = {k: v + 0.5 * torch.randn_like(v) for k, v in original.items()}
        if "lm_head.weight" in state:  # tied to the embedding, as the actor's state dict has it
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        assert asyncio.run(server.update_weights(state, global_steps=7)) == len(state)
        loaded = server.model.state_dict()
        assert all(torch.equal(loaded[k], v) for k, v in state.items())
        after = asyncio.run(server.generate("y", prompt_ids=PROMPT, sampling_params=params))
        assert (after.token_ids, after.log_probs) != (before.token_ids, before.log_probs)
        assert after.extra_fields["global_steps"] == 7
        assert server.weight_info()["weight_syncs"] >= 1
    finally:
        asyncio.run(server.update_weights(original, global_steps=None))


def test_unknown_weight_names_are_rejected(server):
    with pytest.raises(KeyError, match="does not have"):
        asyncio.run(server.update_weights({"not.a.weight": torch.zeros(1)}))


@pytest.mark.parametrize(
    ("verl_device", "torch_sees_a_gpu", "expected"),
    [
        ("cpu", False, "cpu"),  # the CPU dry run
        ("cpu", True, "cpu"),  # the CPU dry run on a machine that has a GPU: verl's platform decides
        ("cuda", True, "cuda:0"),  # the one-GPU demo: the GPU the job's runtime_env shows the server
        ("cuda", False, "cpu"),  # a CUDA job whose server process sees no GPU: the host
    ],
)
def test_the_server_generates_on_verl_s_device_where_its_process_sees_one(
    monkeypatch, verl_device, torch_sees_a_gpu, expected
):
    import verl.utils.device

    from verl_split.runtime.cpu import server as server_module

    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: verl_device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: torch_sees_a_gpu)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(torch_sees_a_gpu))
    assert server_module.generation_device() == torch.device(expected)
