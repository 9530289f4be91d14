"""The critic loads with the attention its config names (``verl_split/runtime/attention/``), on any device.

Real verl (its ``load_valuehead_model``, patched by the catalogue's own seams), real transformers and the tiny
critic of the CPU dry run; the device verl reports is set to ``cuda`` where a test is about a GPU, as a GPU
without flash-attn is the case that stopped a CUDA run (verl asks for ``flash_attention_2`` whatever the config
says). Nothing here needs a GPU: the model loads on the host either way.
"""

from __future__ import annotations

import sys

import pytest
import torch

from verl_split import seam_catalogue
from verl_split.core import log
from verl_split.plugin.seam import patch_seam, unpatch_seam
from verl_split.runtime.attention import critic

pytestmark = pytest.mark.unit


def seams_of(switch: str):
    return [s for s in seam_catalogue.SEAMS if s.switch == switch and s.target == "verl.utils.model"]


@pytest.fixture
def on_a_gpu_without_flash_attn(monkeypatch):
    """verl reports a CUDA device; ``flash_attn`` cannot be imported (``None`` in ``sys.modules``)."""
    import verl.utils.device

    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: "cuda")
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    assert not critic.flash_attn_installed()


def load_critic(switch: str, path, attention: str | None):
    """verl's own ``load_valuehead_model`` on the critic at ``path``, with ``switch``'s seams on it."""
    import verl.utils.model
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, **({"attn_implementation": attention} if attention else {}))
    config.num_labels = 1  # as verl's engine sets it before the call (verl/workers/engine/fsdp/transformer_impl.py)
    seams = seams_of(switch)
    for seam in seams:
        patch_seam(seam, verl.utils.model)
    try:
        return verl.utils.model.load_valuehead_model(path, torch.float32, config, False)
    finally:
        for seam in seams:
            unpatch_seam(seam, verl.utils.model)


@pytest.mark.parametrize("switch", ["split", "cpu"])
def test_on_a_gpu_without_flash_attn_the_critic_loads_with_sdpa_under_either_switch(
    switch, on_a_gpu_without_flash_attn, tiny_assets, caplog
):
    log.forget_once()
    with caplog.at_level("INFO", logger="verl_split"):
        model = load_critic(switch, tiny_assets.critic_model, "flash_attention_2")
    assert type(model).__name__ == "Qwen2ForTokenClassification"
    assert model.config._attn_implementation == "sdpa"
    lines = [r.getMessage() for r in caplog.records if "the critic loads with" in r.getMessage()]
    assert lines == [
        "verl-split: the critic loads with sdpa attention (flash-attn is not installed here, so sdpa "
        "instead of flash_attention_2)"
    ]


def test_the_attention_the_config_names_is_the_one_loaded(on_a_gpu_without_flash_attn, tiny_assets):
    model = load_critic("split", tiny_assets.critic_model, "eager")
    assert model.config._attn_implementation == "eager"


def test_without_verl_split_verl_s_loader_asks_for_flash_attn_and_fails(on_a_gpu_without_flash_attn, tiny_assets):
    """What the seam answers: stock verl's critic cannot start here."""
    import verl.utils.model
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_assets.critic_model, attn_implementation="sdpa")
    with pytest.raises(Exception, match="trl|flash"):
        verl.utils.model.load_valuehead_model(tiny_assets.critic_model, torch.float32, config, False)


def test_where_flash_attn_is_installed_and_asked_for_verl_s_own_loader_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(critic, "flash_attn_installed", lambda: True)

    class Config:
        _attn_implementation = "flash_attention_2"

    result = critic.wrap_load_valuehead_model(
        lambda *a, **k: calls.append((a, k)) or "verl's", None, ("p", None, Config(), False), {}
    )
    assert result == "verl's" and len(calls) == 1


@pytest.mark.parametrize(
    ("configured", "have_flash_attn", "expected"),
    [
        ("flash_attention_2", True, None),  # verl's default with flash-attn: stock, unchanged
        (None, True, None),
        ("flash_attention_2", False, "sdpa"),  # no flash-attn: sdpa, said in the log line
        (None, False, "sdpa"),
        ("sdpa", True, "sdpa"),  # the config names another: that one, flash-attn or not
        ("eager", False, "eager"),
    ],
)
def test_the_attention_chosen(configured, have_flash_attn, expected):
    assert critic.critic_attention(configured, have_flash_attn)[0] == expected
