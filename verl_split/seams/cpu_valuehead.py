"""Load the critic's value model with the attention the config asks for.

Target: ``verl/utils/model.py`` ``load_valuehead_model``, which
``verl/workers/engine/fsdp/transformer_impl.py`` calls to build the critic and which
passes ``attn_implementation="flash_attention_2"`` whatever
``critic.model.override_config.attn_implementation`` says; flash-attention does not
exist on CPU. On the CPU platform the wrapper loads the token-classification head
(one label, the value) with the attention already resolved in the model config.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping


def _wrap_load_valuehead_model(wrapped, instance, args, kwargs):
    from verl.utils.device import get_device_name

    if get_device_name() != "cpu":
        return wrapped(*args, **kwargs)
    return _load_token_classification(*args, **kwargs)


def _load_token_classification(local_path, torch_dtype, model_config, trust_remote_code):
    from transformers import AutoModelForTokenClassification

    return AutoModelForTokenClassification.from_pretrained(
        pretrained_model_name_or_path=local_path,
        torch_dtype=torch_dtype,
        config=model_config,
        attn_implementation=getattr(model_config, "_attn_implementation", None) or "sdpa",
        trust_remote_code=trust_remote_code,
    )


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module, "load_valuehead_model", _wrap_load_valuehead_model)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module, "load_valuehead_model")
