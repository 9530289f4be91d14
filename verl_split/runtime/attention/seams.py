"""The critic's attention seam (``critic.py`` says why), under either switch: split placement's and the CPU dry run's.

``VERL_SPLIT`` alone (a GPU user without flash-attn), ``VERL_SPLIT_CPU`` alone (the demo's stock run, on the CPU
or on a GPU) and both at once each register it; the same wrapper is put on once (``plugin/wrapping.py``).
"""

from __future__ import annotations

from verl_split.core import compat
from verl_split.plugin.seam import Seam, Wrap


def critic_attention_seam(name: str, switch: str, feature: str) -> Seam:
    """verl's ``load_valuehead_model`` with the attention the critic's config names."""
    return Seam(
        name,
        "verl.utils.model",
        switch,
        feature,
        compat.ANY,
        needs=("load_valuehead_model(local_path@0, torch_dtype@1, model_config@2, trust_remote_code@3)",),
        wraps=(Wrap("load_valuehead_model", "verl_split.runtime.attention.critic:wrap_load_valuehead_model"),),
    )


SEAMS: tuple[Seam, ...] = (critic_attention_seam("critic_attention", "split", "placement"),)
