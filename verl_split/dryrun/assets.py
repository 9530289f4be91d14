"""Tiny, locally made assets for the CPU dry run: model, tokenizer, data set, reward.

Nothing is downloaded: the model is a randomly initialised Qwen2-style causal LM, the
tokenizer a byte-level ``tokenizers`` model with a chat template, the data set a
synthetic "a+b=" task in verl's RLHF parquet format. The critic is the same network with
a one-output value head (``Qwen2ForTokenClassification``, what verl's critic loads), saved
with its head: built from the LM path instead, verl would draw the head at random in
every run, and two runs of the same job could not be compared number for number.

Three shapes of the same network: ``cpu`` (head size 16, what the dry run, the tests and the benchmarks
use; never to change), ``gpu`` (head size 64, for ``scripts/gpu_smoke.py``) and ``vllm`` (the ``gpu`` network
with a vocabulary exactly the tokenizer's, for the real vLLM on the CPU: vLLM's CPU attention takes no head size
under 32, and verl's vLLM server masks the logits of ids past the tokenizer's length, which the actor does not, so
a larger vocabulary shifts every rollout log-prob against the actor's by up to log(320/259) = 0.21).
Head size 64 is one every CUDA attention backend of vLLM 0.24.0 takes (FlashInfer's list is 64/128/256/512, its
``FlashInferBackend.get_supported_head_sizes``) and one flash-attn 2.8.3 checks and compiles a kernel for;
``tests/project/test_gpu_smoke_sources.py`` reads those rules from the two releases' sdists.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

#: Bump when what make_tiny_assets writes changes, so old caches are rebuilt.
ASSETS_VERSION = 3
_MARKER = "verl_split_assets.json"

DATA_SOURCE = "verl_split/arith"
REWARD_FUNCTION_NAME = "compute_score"

_EOS = "<|endoftext|>"
_TURN_MARKERS = ["<|im_start|>", "<|im_end|>"]

# Qwen's turn markers; verl's agent loop calls apply_chat_template(add_generation_prompt=True).
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of the tiny Qwen2 network that differ between its variants."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int = 320  # >= the tokenizer's (TOKENIZER_SIZE); a round size keeps the embedding shardable

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads


#: The CPU dry run's network: head size 16. Tests and benchmarks rely on its bytes: never change it.
CPU_SHAPE = ModelShape(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
#: The GPU smoke run's network: the same layout four times wider, head size 64 (see the docstring).
GPU_SHAPE = replace(CPU_SHAPE, hidden_size=256, intermediate_size=512)
#: Entries of the tokenizer: 256 bytes and three special tokens (``_build_tokenizer``).
TOKENIZER_SIZE = 259
#: The real vLLM's network on the CPU: the GPU shape, its vocabulary the tokenizer's (see the docstring).
VLLM_SHAPE = replace(GPU_SHAPE, vocab_size=TOKENIZER_SIZE)
SHAPES = {"cpu": CPU_SHAPE, "gpu": GPU_SHAPE, "vllm": VLLM_SHAPE}


@dataclass(frozen=True)
class TinyAssets:
    """Paths of the assets, all under ``root``."""

    root: Path
    model: Path  # model, tokenizer and generation config, as save_pretrained writes them
    critic_model: Path  # the same backbone with a seeded value head, and the tokenizer
    train_file: Path
    val_file: Path
    reward_file: Path
    reward_name: str = REWARD_FUNCTION_NAME

    def to_json(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}


def make_tiny_assets(directory: str | os.PathLike[str], *, seed: int = 0, variant: str = "cpu") -> TinyAssets:
    """Make the assets under ``directory``, or reuse them if a previous call made them.

    ``variant`` picks the network's shape (``SHAPES``): ``cpu`` for the dry run, ``gpu`` for vLLM on GPUs,
    ``vllm`` for vLLM on the CPU.
    """
    if variant not in SHAPES:
        raise ValueError(f"variant must be one of {sorted(SHAPES)}, not {variant!r}")
    root = Path(directory).expanduser().resolve()
    assets = _layout(root)
    if _is_complete(root, variant):
        return assets
    root.mkdir(parents=True, exist_ok=True)
    # Build in a sibling temporary folder and move it in place: a run killed half-way,
    # or two processes building at once, never leave a half-made cache that looks done.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        _build(staging, seed, variant)
        for name in ("model", "critic_model", "data", "reward.py", _MARKER):
            target = root / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            os.replace(staging / name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return assets


def _layout(root: Path) -> TinyAssets:
    return TinyAssets(
        root=root,
        model=root / "model",
        critic_model=root / "critic_model",
        train_file=root / "data" / "train.parquet",
        val_file=root / "data" / "val.parquet",
        reward_file=root / "reward.py",
    )


def make_tiny_gpu_assets(directory: str | os.PathLike[str], *, seed: int = 0) -> TinyAssets:
    """The assets with the ``gpu`` network (head size 64), for vLLM and flash-attention."""
    return make_tiny_assets(directory, seed=seed, variant="gpu")


def _is_complete(root: Path, variant: str) -> bool:
    try:
        marker = json.loads((root / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    # The CPU marker has no "variant" (its bytes predate the GPU shape).
    return marker.get("version") == ASSETS_VERSION and marker.get("variant", "cpu") == variant


def _marker(variant: str) -> dict[str, object]:
    return {"version": ASSETS_VERSION} if variant == "cpu" else {"version": ASSETS_VERSION, "variant": variant}


def _build(staging: Path, seed: int, variant: str) -> None:
    tokenizer = _build_tokenizer()
    _build_model(staging / "model", tokenizer, seed, SHAPES[variant])
    (staging / "data").mkdir()
    _write_split(staging / "data" / "train.parquet", "train", count=256, seed=seed)
    _write_split(staging / "data" / "val.parquet", "test", count=16, seed=seed + 1)
    # A copy of the reward module, so the cache folder is self-contained.
    from verl_split.runtime.cpu import reward

    shutil.copyfile(reward.__file__, staging / "reward.py")
    (staging / _MARKER).write_text(json.dumps(_marker(variant)))


def _build_tokenizer():
    """A byte-level BPE with no merges: one token per byte, plus the special tokens.

    transformers 5 loads any tokenizer next to a ``qwen2`` config as ``Qwen2Tokenizer``
    (byte-level BPE with Qwen's split rule), whatever class the files name, so the
    tokenizer must be of that kind. No merges keeps the vocabulary at 259 entries.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={char: index for index, char in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=_EOS, pad_token=_EOS, additional_special_tokens=_TURN_MARKERS
    )
    tokenizer.chat_template = _CHAT_TEMPLATE
    return tokenizer


def _build_model(target: Path, tokenizer, seed: int, shape: ModelShape) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    assert len(tokenizer) == TOKENIZER_SIZE <= config.vocab_size
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    _build_value_model(target, tokenizer, seed)


def _build_value_model(lm_dir: Path, tokenizer, seed: int) -> None:
    """The critic: the LM's backbone plus a value head drawn from ``seed``, next to the LM."""
    import torch
    from transformers import Qwen2ForTokenClassification

    torch.manual_seed(seed + 1)
    critic = Qwen2ForTokenClassification.from_pretrained(lm_dir, num_labels=1)
    target = lm_dir.parent / "critic_model"
    critic.save_pretrained(target)
    tokenizer.save_pretrained(target)


def _write_split(path: Path, split: str, count: int, seed: int) -> None:
    import pandas as pd

    # Distinct prompts within a split (16 x 16 pairs): no two rows of a batch ask the same,
    # so a run's samples do not depend on which of two identical requests came first.
    pairs = [(a, b) for a in range(16) for b in range(16)]
    random.Random(seed).shuffle(pairs)
    rows = []
    for index, (a, b) in enumerate(pairs[:count]):
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": index},
            }
        )
    pd.DataFrame(rows).to_parquet(path)
