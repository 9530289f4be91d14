"""Parse each of verl's hydra YAML files once per test process, not once per compose.

Every ``compose_config`` (``verl_split/tools/hydra_config.py``) makes a fresh hydra, which reads and parses
about 27 YAML files of verl's ``trainer/config`` with PyYAML's pure-Python loader (OmegaConf's loader:
``omegaconf.OmegaConf.load``). The unit tier composes 65 times: the parse alone was about a third of its
compose time. This keeps the parsed result by the file's text and hands out a deep copy, so hydra and
OmegaConf get the same objects as from a fresh parse (same loader, same text); only the parse is skipped.
Test processes only (``tests/conftest.py``); the product composes a job once and parses as hydra does.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml


class _CachedYaml:
    """``omegaconf.omegaconf``'s view of the ``yaml`` module, with ``load`` kept by text."""

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(yaml, name)

    def load(self, stream: Any, Loader: Any) -> Any:  # noqa: N803 (yaml's own keyword)
        text = stream.read() if hasattr(stream, "read") else stream
        key = (Loader.__qualname__, text)  # OmegaConf makes its loader class anew on every call
        if key not in self._parsed:
            self._parsed[key] = yaml.load(text, Loader=Loader)
        return copy.deepcopy(self._parsed[key])


def install() -> None:
    import omegaconf.omegaconf

    if not isinstance(omegaconf.omegaconf.yaml, _CachedYaml):
        omegaconf.omegaconf.yaml = _CachedYaml()
