"""Un/padding helpers without flash-attention on verl 0.7/0.8's CPU path.

Target: ``verl/utils/attention_utils.py`` ``_get_attention_functions``, which on any
non-NPU host imports ``flash_attn.bert_padding`` (a CUDA-only package) for
``index_first_axis``/``pad_input``/``rearrange``/``unpad_input``; the engine workers
use them to strip padding before every forward pass. verl 0.9 falls back to
pure-torch versions when flash-attention is missing; on the CPU device this wrapper
hands out the pure-torch versions transformers ships
(``transformers/modeling_flash_attention_utils.py``, same signatures and results) and
einops' ``rearrange``. With an accelerator, verl's own choice stands.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping


def _rearrange(*args, **kwargs):
    # Imported on first use, as verl 0.9 does: einops is not a dependency of the padding helpers.
    from einops import rearrange

    return rearrange(*args, **kwargs)


def _wrap_get_attention_functions(wrapped, instance, args, kwargs):
    from verl.utils.device import get_device_name

    if get_device_name() != "cpu":
        return wrapped(*args, **kwargs)
    from transformers.modeling_flash_attention_utils import _index_first_axis, _pad_input, _unpad_input

    return _index_first_axis, _pad_input, _rearrange, _unpad_input


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "_get_attention_functions", _wrap_get_attention_functions)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "_get_attention_functions")
