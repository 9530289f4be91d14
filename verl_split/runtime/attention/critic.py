"""verl's critic with the attention its config names, where verl would ask for flash-attn regardless.

verl's ``load_valuehead_model`` (``verl/utils/model.py``, every release 0.7-0.9) builds the critic with
``attn_implementation="flash_attention_2"`` whatever ``critic.model.override_config.attn_implementation`` says;
without flash-attn transformers refuses, and verl then asks for trl ("please install trl"). So a critic cannot
start on a machine without flash-attn (a CPU, a GPU whose CUDA has no flash-attn build), nor with another
attention asked for. Where flash-attn is installed and the config asks for it (verl's default), verl's own
loader runs unchanged. Otherwise the critic is loaded as verl's first try loads it (the token-classification
head, one label: the value) with the configured attention, or ``sdpa`` where the configured one is flash-attn's
and flash-attn is absent; one log line says which and why.
"""

from __future__ import annotations

import importlib.util
import logging

from verl_split.core import log
from verl_split.plugin.args import get_argument

logger = logging.getLogger("verl_split")

FLASH_ATTENTION = "flash_attention_2"
#: What the critic loads with where its config asks for flash-attn and flash-attn is not installed.
FALLBACK = "sdpa"


def flash_attn_installed() -> bool:
    """flash-attn can be imported here (found, not imported: importing it initialises CUDA)."""
    return importlib.util.find_spec("flash_attn") is not None


def critic_attention(configured: str | None, have_flash_attn: bool) -> tuple[str | None, str]:
    """The attention to load the critic with, and why; ``(None, "")``: verl's own loader, unchanged."""
    if configured in (None, FLASH_ATTENTION):
        if have_flash_attn:
            return None, ""
        return FALLBACK, f"flash-attn is not installed here, so {FALLBACK} instead of {FLASH_ATTENTION}"
    return configured, (
        f"the attention critic.model.override_config.attn_implementation names; verl's load_valuehead_model "
        f"would ask for {FLASH_ATTENTION} whatever the config says"
    )


def wrap_load_valuehead_model(wrapped, instance, args, kwargs):
    config = get_argument(args, kwargs, 2, "model_config")
    attention, why = critic_attention(getattr(config, "_attn_implementation", None), flash_attn_installed())
    if attention is None:
        return wrapped(*args, **kwargs)
    log.once(logger, f"verl-split: the critic loads with {attention} attention ({why})")
    from transformers import AutoModelForTokenClassification

    return AutoModelForTokenClassification.from_pretrained(
        pretrained_model_name_or_path=get_argument(args, kwargs, 0, "local_path"),
        torch_dtype=get_argument(args, kwargs, 1, "torch_dtype"),
        config=config,
        attn_implementation=attention,
        trust_remote_code=get_argument(args, kwargs, 3, "trust_remote_code"),
    )
