"""A hold inside the real vLLM engine, for the vLLM tier's scheduling test (tests/on_vllm/test_vllm_migration.py).

vLLM loads it into its engine process as a custom logits processor (the server's
``engine_kwargs.vllm.logits_processors``: ``support.vllm_hold:HoldAtTokens``); it changes no logits. When the folder
``$VLLM_HOLD_DIR`` holds a file ``hold`` reading ``<requests> <tokens> <release>``, the first engine whose batch has
``<requests>`` requests with ``<tokens>`` generated tokens or more each stops in its next sampling step: it removes
``hold`` (so it holds once, and no other engine holds for it), writes ``held`` (the batch's token counts) and waits
until the file ``<release>`` exists. While it waits the engine generates nothing, so the test acts on requests that
are surely running, each with its tokens so far, with no clock deciding anything.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

#: The folder the test and the engines share (unset: the processor does nothing).
HOLD_DIR = "VLLM_HOLD_DIR"
#: How often a held engine looks for its release file.
POLL_S = 0.01


class HoldAtTokens(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory) -> None:  # noqa: ANN001 (vLLM's signature)
        folder = os.environ.get(HOLD_DIR)
        self._folder = Path(folder) if folder else None
        #: Per batch row, the request's generated tokens: vLLM's own list, which it extends in place.
        self._outputs: dict[int, list[int]] = {}

    @classmethod
    def validate_params(cls, sampling_params) -> None:  # noqa: ANN001
        return None

    def is_argmax_invariant(self) -> bool:
        return False  # vLLM skips an invariant processor under greedy sampling: this one must always run

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for row in batch_update.removed:
            self._outputs.pop(row, None)
        for row, _params, _prompt, outputs in batch_update.added:
            self._outputs[row] = outputs
        for first, second, direction in batch_update.moved:
            if direction == MoveDirectionality.SWAP:
                self._outputs[first], self._outputs[second] = self._outputs.get(second), self._outputs.get(first)
            else:
                self._outputs[second] = self._outputs.pop(first, None)
        self._outputs = {row: out for row, out in self._outputs.items() if out is not None}

    def apply(self, logits):  # noqa: ANN001, ANN201
        if self._folder is not None:
            self._maybe_hold()
        return logits

    def _maybe_hold(self) -> None:
        armed = self._folder / "hold"
        try:
            requests, tokens, release = armed.read_text().split()
        except (FileNotFoundError, ValueError):
            return
        counts = sorted(len(out) for out in self._outputs.values())
        if sum(count >= int(tokens) for count in counts) < int(requests):
            return
        armed.unlink(missing_ok=True)
        (self._folder / "held").write_text(json.dumps(counts))
        while not (self._folder / release).exists():
            time.sleep(POLL_S)
