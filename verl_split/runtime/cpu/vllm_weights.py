"""vLLM on the CPU computes its linear layers from the plain weights, so that verl's weight reload reaches them.

verl pushes the actor's weights into its vLLM servers by loading them in place, with the model's own
``load_weights`` (``_update_weights`` in ``verl/workers/rollout/vllm_rollout/utils.py``), on every weight sync.
vLLM's CPU platform, after the first load, packs each linear layer's weight for its CPU kernels (oneDNN, or
sgl-kernel) and, for ``LinearBase`` layers, replaces ``layer.weight`` with an empty parameter that has no
``weight_loader`` (``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`` in
``vllm/model_executor/layers/utils.py``, called by ``UnquantizedLinearMethod.process_weights_after_loading``).
verl's first sync then fails on ``'Parameter' object has no attribute 'weight_loader'`` and the engine dies; and
a layer that keeps its weight but computes with a packed copy of it (the embedding's tied ``lm_head``) would keep
generating from the first weights.

So in vLLM's processes (``verl_split/_vllm_plugin.py``, its general-plugin entry point) the dispatch is replaced:
each 2-D weight stays where vLLM loaded it and ``F.linear`` computes with it, so every reload is seen. Other layers
(MoE experts, convolutions) keep vLLM's own dispatch. The cost is vLLM's packed CPU GEMM, which the tiny networks
of the CPU dry run do not need.
"""

from __future__ import annotations

#: What this module put in vLLM's place, so that a second call (plugins load once per process, but a test may
#: call again) wraps vLLM's function, not its own.
_ORIGINAL_ATTR = "__verl_split_original__"


def keep_plain_weights() -> None:
    """Replace vLLM's CPU GEMM dispatch in this process (idempotent)."""
    import torch.nn.functional as F
    from vllm.model_executor.layers import utils

    current = utils.dispatch_cpu_unquantized_gemm
    original = getattr(current, _ORIGINAL_ATTR, current)

    def dispatch_with_plain_weights(layer, remove_weight: bool) -> None:
        weight = layer.weight
        if weight.is_meta or weight.ndim != 2:
            original(layer, remove_weight)
            return
        layer.cpu_linear = F.linear  # (x, weight, bias): the layer's weight as loaded, never a packed copy

    setattr(dispatch_with_plain_weights, _ORIGINAL_ATTR, original)
    # Both callers (linear.py, vocab_parallel_embedding.py) import the function from ``utils`` when they call it.
    utils.dispatch_cpu_unquantized_gemm = dispatch_with_plain_weights
