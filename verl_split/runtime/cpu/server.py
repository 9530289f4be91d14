"""The CPU rollout's generation server: one Ray actor per replica, Hugging Face ``generate``.

What ``rollout.py``'s replica launches and its worker-side adapter pushes each step's weights to; verl's
agent loop sends it requests (``generate``) as it would a vLLM server. Slow, one request at a time, no
KV-cache management: a stand-in for dry runs and tests, not a server for real work. It generates on the
host's CPU in a CPU dry run and on the GPU where the run has one (``generation_device``): the one-GPU demo.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import zlib
from collections import Counter
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput

from verl_split.core import settings
from verl_split.runtime.cpu.hold import HeldRequests
from verl_split.runtime.cpu.lengths import long_tail_cap

logger = logging.getLogger("verl_split.cpu_rollout")

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def generation_device() -> torch.device:
    """Where this process generates: verl's device where this process sees one (its first), else the host.

    verl's answer (``get_device_name``: the platform, ``VERL_PLATFORM``; ``cpu`` in a CPU dry run) and not
    torch's alone: a CPU dry run on a machine that has a GPU stays on the CPU. The server actor asks Ray for no
    GPU, so it sees what its job's runtime_env shows it (the one-GPU demo's ``CUDA_VISIBLE_DEVICES``).
    """
    from verl.utils.device import get_device_name

    name = get_device_name()
    module = getattr(torch, name, None) if name != "cpu" else None
    if module is None or not module.is_available() or module.device_count() == 0:
        return torch.device("cpu")
    return torch.device(name, 0)


def _version(global_steps: int | None, state_dict: dict[str, torch.Tensor]) -> Any:
    """The version of freshly loaded weights that a resumed run reproduces.

    Not a count of syncs since the process started: that restarts at zero on resume. verl
    passes the trainer's global step with every sync (0.8+ workers; the step a checkpoint
    restores, and the step of the same weights in the uninterrupted run). 0.7's legacy FSDP
    workers do not pass it on to the rollout (``fsdp_workers.py`` ``update_weights`` drops
    ``global_steps``); there the version is a checksum of the weights themselves, which a
    checkpoint restores bit for bit on ``RayPPOTrainer``.
    """
    if global_steps is not None:
        return ("step", int(global_steps))
    digest = 0
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().to("cpu").contiguous()
        digest = zlib.crc32(name.encode(), digest)
        digest = zlib.crc32(tensor.view(torch.uint8).numpy().tobytes(), digest)
    return ("crc32", digest)


class CPUGenerationServer:
    """One replica's generation server: a Hugging Face causal LM on the CPU.

    verl calls ``generate`` concurrently (Ray async actor); requests run one at a time
    in a worker thread. Log-probs are those of the sampled tokens under the
    temperature-scaled logits, i.e. what vLLM reports with
    ``logprobs_mode=processed_logprobs`` and what the actor recomputes as
    ``old_log_probs``, so verl's ``training/rollout_probs_diff_*`` metrics compare like
    with like.
    """

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config
        self.replica_rank = replica_rank
        path = getattr(model_config, "local_path", None) or model_config.path
        attn = (getattr(model_config, "override_config", None) or {}).get("attn_implementation", "sdpa")
        self.dtype = _DTYPES.get(str(config.dtype), torch.float32)
        self.device = generation_device()
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=self.dtype, attn_implementation=attn)
        self.model.to(self.device).eval()
        self.eos_token_id = self.model.generation_config.eos_token_id
        self.pad_token_id = self.model.generation_config.pad_token_id
        self._lock = threading.Lock()  # one generate() or weight load at a time
        self.global_steps: int | None = None
        self.weights_version: Any = None  # of the weights the model holds, see _version
        self.weight_syncs = 0
        self._requests_seen: Counter[tuple[int, ...]] = Counter()  # per prompt, since the last weight sync
        self._announced: Any = object()  # the step whose weights the log last said this server generates with
        self._held = HeldRequests()  # the forced tail of the tests (hold.py); passes everything unless armed
        self._cpu_lengths = settings.current().cpu_lengths

    # -- generation -------------------------------------------------------------------

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        await self._held.admit()
        token_ids, log_probs, stop_reason = await asyncio.to_thread(self._generate, list(prompt_ids), sampling_params)
        if self._announced != self.global_steps:  # once per weight version: which weights answer requests
            self._announced = self.global_steps
            logger.info("replica %d generates with the weights of step %s", self.replica_rank, self.global_steps)
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason=stop_reason,
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    def _max_new_tokens(self, prompt_len: int, sampling_params: dict[str, Any]) -> int:
        limit = int(self.config.response_length)
        for key in ("max_tokens", "max_new_tokens"):
            if sampling_params.get(key) is not None:
                limit = min(limit, int(sampling_params[key]))
        max_model_len = getattr(self.config, "max_model_len", None)
        if max_model_len:
            limit = min(limit, int(max_model_len) - prompt_len)
        return max(limit, 0)

    def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> tuple[list[int], list[float], str]:
        max_new_tokens = self._max_new_tokens(len(prompt_ids), sampling_params)
        if self._cpu_lengths == "long_tail":
            max_new_tokens = min(max_new_tokens, long_tail_cap(prompt_ids, int(self.config.response_length)))
        if max_new_tokens == 0:
            return [], [], "length"
        temperature = float(sampling_params.get("temperature", 1.0))
        greedy = temperature <= 0 or not sampling_params.get("do_sample", True)
        top_k = int(sampling_params.get("top_k", -1))
        options: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": not greedy,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "return_dict_in_generate": True,
            "output_logits": True,  # raw logits: the log-probs are computed below, like the actor does
        }
        if not greedy:
            options.update(
                temperature=temperature,
                top_p=float(sampling_params.get("top_p", 1.0)),
                top_k=top_k if top_k > 0 else None,
            )
        else:
            options.update(temperature=None, top_p=None, top_k=None)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        # Forked where it samples (the host's generator, or the GPU's too), so the seed below is undone after.
        if self.device.type == "cpu":
            forked = torch.random.fork_rng(devices=[])
        else:
            forked = torch.random.fork_rng(devices=[self.device.index], device_type=self.device.type)
        with self._lock, torch.no_grad(), forked:
            # Sample from a seed that depends on the prompt, on how often it was asked for
            # since the last weight sync, and on the weights' version -- not on the order in
            # which concurrent requests arrive -- so that two runs of the same job sample the
            # same answers (the overlap tests compare runs number for number). The version is
            # what a checkpoint restores (see _version), so a resumed run samples what the
            # uninterrupted run sampled at the same step.
            key = tuple(prompt_ids)
            torch.manual_seed(zlib.crc32(repr((key, self._requests_seen[key], self.weights_version)).encode()))
            self._requests_seen[key] += 1
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **options)
        tokens = out.sequences[0, len(prompt_ids) :].tolist()
        scale = 1.0 if greedy else temperature
        log_probs = [
            torch.log_softmax(logits[0].float() / scale, dim=-1)[token].item()
            for logits, token in zip(out.logits, tokens, strict=False)
        ]
        stop_reason = "completed" if tokens and tokens[-1] == self.eos_token_id else "length"
        return tokens, log_probs, stop_reason

    # -- weights ----------------------------------------------------------------------

    async def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Load the actor's weights; return how many tensors were loaded."""
        return await asyncio.to_thread(self._load, state_dict, global_steps)

    def _load(self, state_dict: dict[str, torch.Tensor], global_steps: int | None) -> int:
        own = self.model.state_dict()
        unknown = sorted(set(state_dict) - set(own))
        if unknown:
            raise KeyError(f"weights from the actor that the rollout model does not have: {unknown[:5]}")
        with self._lock, torch.no_grad():
            for name, tensor in state_dict.items():  # copy_ moves the host copy onto the model's device
                own[name].copy_(tensor.to(own[name].dtype))
        self.global_steps = global_steps
        self.weights_version = _version(global_steps, own)
        self.weight_syncs += 1
        self._requests_seen.clear()
        logger.info("replica %d loaded %d tensors (step %s)", self.replica_rank, len(state_dict), global_steps)
        return len(state_dict)

    def weight_info(self) -> dict[str, Any]:
        """How many weight syncs this server has received, and the last step's number."""
        return {"weight_syncs": self.weight_syncs, "global_steps": self.global_steps}

    # -- lifecycle hooks verl calls on every server; nothing to free on the CPU ---------

    async def wake_up(self) -> None:
        pass

    async def sleep(self) -> None:
        pass

    # -- the forced tail of the tests (hold.py) ---------------------------------------

    async def hold_after(self, answer_first: int) -> None:
        self._held.arm(answer_first)

    async def release_held(self) -> int:
        return self._held.release()

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        pass

    async def resume_generation(self) -> None:
        pass

    async def clear_kv_cache(self) -> None:
        pass

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def start_profile(self, **kwargs: Any) -> None:
        pass

    async def stop_profile(self) -> None:
        pass
