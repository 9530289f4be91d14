"""verl-split's vLLM general plugin (verl_split/_vllm_plugin.py): declared where vLLM looks for it, and a no-op
without ``VERL_SPLIT_CPU`` (GPU runs). What it does on vLLM's CPU platform runs in tests/on_vllm/ (the real vLLM)."""

from __future__ import annotations

import sys

import pytest
import tomllib
from support.paths import ROOT

from verl_split import _vllm_plugin
from verl_split.core.errors import SettingsError

pytestmark = pytest.mark.unit


def test_it_is_a_vllm_general_plugin_entry_point():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["vllm.general_plugins"] == {"verl_split_cpu": "verl_split._vllm_plugin:register"}


@pytest.mark.parametrize("value", [None, "0", "off"])
def test_without_cpu_mode_it_changes_nothing_and_imports_no_vllm(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("VERL_SPLIT_CPU", raising=False)
    else:
        monkeypatch.setenv("VERL_SPLIT_CPU", value)
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    _vllm_plugin.register()
    assert "vllm" not in sys.modules


def test_a_typo_in_cpu_mode_is_refused(monkeypatch):
    monkeypatch.setenv("VERL_SPLIT_CPU", "yes please")
    with pytest.raises(SettingsError, match="VERL_SPLIT_CPU"):
        _vllm_plugin.register()
