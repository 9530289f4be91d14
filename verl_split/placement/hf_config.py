"""A model's shape from its Hugging Face ``config.json``: a local folder or the Hugging Face cache, never a download.

The planner reads it for the shared-rollout memory estimate (``placement.memory``: parameters) and for the
Megatron rules that depend on the model (``placement.megatron``: layers per pipeline stage, experts per
expert-parallel rank). A model it cannot find is an unknown shape: those rules are then not checked.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from verl_split.placement.mesh import ModelShape

#: Keys the Hugging Face configs of MoE models use for their routed-expert count. A config with another key
#: naming experts is a MoE of unknown count (None), never taken for a dense model.
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def params_from_config(path: Any, value_head: bool = False) -> float | None:
    """Parameters of a decoder model from its ``config.json``: a local folder, or the Hugging Face cache."""
    return shape_from_config(path, value_head).params


def shape_from_config(path: Any, value_head: bool = False) -> ModelShape:
    """Layers, routed experts and parameters (those in experts apart); unknown fields are None."""
    config = _read_hf_config(path)
    if config is None:
        return ModelShape()
    config = config.get("text_config", config)
    try:
        layers = int(config["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return ModelShape()
    experts: int | None = next(
        (int(config[k]) for k in _EXPERT_KEYS if isinstance(config.get(k), int) and config[k] > 0), 0
    )
    if not experts and any("expert" in str(key) for key in config):
        experts = None
    try:
        hidden = int(config["hidden_size"])
        vocab = int(config["vocab_size"])
        heads = int(config.get("num_attention_heads", 1))
        head_dim = int(config.get("head_dim") or hidden // heads)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        inter = int(config.get("moe_intermediate_size") or config["intermediate_size"]) if (experts or 0) > 1 else None
        inter = inter or int(config["intermediate_size"])
    except (KeyError, TypeError, ValueError):
        return ModelShape(layers=layers, experts=experts)
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * inter * max(experts or 1, 1)
    head = hidden if value_head else (0 if config.get("tie_word_embeddings") else vocab * hidden)
    params = float(vocab * hidden + layers * (attention + mlp + 2 * hidden) + head)
    moe = (experts or 0) > 1
    return ModelShape(layers=layers, experts=experts, params=params, expert_params=float(layers * mlp) if moe else 0.0)


def _read_hf_config(path: Any) -> dict[str, Any] | None:
    if not isinstance(path, str) or not path:
        return None
    local = os.path.expanduser(path)
    candidates = [os.path.join(local, "config.json")]
    if "/" in path and not os.path.isdir(local):
        hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
        )
        folder = os.path.join(hub, "models--" + path.replace("/", "--"), "snapshots", "*", "config.json")
        candidates += sorted(glob.glob(folder))
    for candidate in candidates:
        try:
            with open(candidate) as handle:
                loaded = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(loaded, dict):
            return loaded
    return None
