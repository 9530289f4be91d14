"""verl's vLLM server and replica, recording what each server was asked (the vLLM tier's scheduling test,
tests/on_vllm/test_vllm_migration.py): per server the request ids in the order they arrived, and per request served
its prompt, its tokens and why it stopped. Only records: every request runs through verl's own ``generate``.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica


class RecordingServer(vLLMHttpServer):
    async def generate(self, prompt_ids, sampling_params, request_id, **kwargs):  # noqa: ANN001, ANN201
        self.__dict__.setdefault("_arrived", []).append(request_id)
        output = await super().generate(prompt_ids, sampling_params, request_id, **kwargs)
        self.__dict__.setdefault("_served", []).append(
            {
                "request_id": request_id,
                "prompt_ids": list(prompt_ids),
                "token_ids": list(output.token_ids),
                "stop_reason": output.stop_reason,
                "global_steps": output.extra_fields.get("global_steps"),
            }
        )
        return output

    def record(self) -> dict[str, Any]:
        return {"arrived": list(self.__dict__.get("_arrived", [])), "served": list(self.__dict__.get("_served", []))}

    async def tokens_so_far(self, request_ids: list[str]) -> dict[str, int]:
        """Per request still running here (by the id it was sent with), the tokens its stream has delivered (read on
        the server's loop, where vLLM's engine client keeps them)."""
        processor = self.engine.output_processor
        counts = {}
        for request_id in request_ids:
            for internal_id in processor.external_req_ids.get(request_id, []):
                counts[request_id] = len(processor.request_states[internal_id].detokenizer.output_token_ids)
        return counts


class RecordingReplica(vLLMReplica):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(RecordingServer)
