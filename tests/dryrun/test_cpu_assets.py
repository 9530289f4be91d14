"""The tiny CPU assets: made once, reused, and in the formats verl reads."""

from __future__ import annotations

import pandas as pd
import pytest

from verl_split.dryrun.assets import make_tiny_assets
from verl_split.runtime.cpu.reward import compute_score

pytestmark = pytest.mark.unit


def test_assets_are_reused(tiny_assets):
    stamp = (tiny_assets.model / "model.safetensors").stat().st_mtime_ns
    again = make_tiny_assets(tiny_assets.root)
    assert again == tiny_assets
    assert (tiny_assets.model / "model.safetensors").stat().st_mtime_ns == stamp


def test_tokenizer_and_model_load_as_verl_loads_them(tiny_assets):
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_assets.model)
    config = AutoConfig.from_pretrained(tiny_assets.model)
    assert config.model_type == "qwen2" and config.hidden_size <= 128 and config.num_hidden_layers == 2
    assert len(tokenizer) <= config.vocab_size
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "3+4="}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text and text.endswith("assistant\n")
    assert tokenizer.eos_token_id == config.eos_token_id


def test_dataset_is_in_verl_rlhf_format(tiny_assets):
    frame = pd.read_parquet(tiny_assets.train_file)
    assert {"prompt", "data_source", "reward_model", "extra_info"} <= set(frame.columns)
    row = frame.iloc[0]
    assert row["prompt"][0]["role"] == "user"
    a, b = row["prompt"][0]["content"].rstrip("=").split("+")
    assert row["reward_model"]["ground_truth"] == str(int(a) + int(b))


def test_reward_function():
    assert compute_score("x", "12", "12") == 1.0
    assert compute_score("x", " 1 2<|endoftext|>", "12") == 1.0
    assert compute_score("x", "7", "12") == 0.1
    assert compute_score("x", "abc", "12") == 0.0


def test_the_vllm_network_s_vocabulary_is_the_tokenizer_s_and_its_head_size_64(tmp_path):
    """verl's vLLM server masks the logits of ids past the tokenizer's length, the actor does not: equal sizes keep
    the rollout's log-probs the actor's. vLLM's CPU attention takes no head size under 32."""
    import json

    from transformers import AutoTokenizer

    from verl_split.dryrun.assets import SHAPES, TOKENIZER_SIZE, make_tiny_assets

    assets = make_tiny_assets(tmp_path, variant="vllm")
    config = json.loads((assets.model / "config.json").read_text())
    assert config["vocab_size"] == len(AutoTokenizer.from_pretrained(assets.model)) == TOKENIZER_SIZE
    assert config["hidden_size"] // config["num_attention_heads"] == SHAPES["vllm"].head_size == 64
    assert SHAPES["cpu"].vocab_size == SHAPES["gpu"].vocab_size == 320  # the dry run's bytes, unchanged
