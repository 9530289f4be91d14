"""Keep each config hydra composed for a test on disk, by everything that decides it, and compose it once.

A hydra compose of verl's trainer config takes about 0.6 s of CPU on this machine (OmegaConf builds a node per
key of ~27 YAML files), and the unit tier composes 67 times: about 44 s of its ~115 s of test time. The
product composes a job once; the tests compose the same configs on every run. So in test processes only
(``tests/conftest.py``), ``hydra.compose`` is wrapped: the result of a compose is pickled (OmegaConf pickles a
``DictConfig`` whole: values, interpolations unresolved, struct and read-only flags) under a key made of

- the config's name, the overrides and compose's other arguments;
- every file under each ``file://`` config folder hydra searches (names and bytes: a verl upgrade, another
  release's tree or an edited YAML is another key), and hydra's and OmegaConf's versions for the ``pkg://``
  configs hydra ships;

and a later compose with the same key unpickles it. Not kept: a compose that fails (its error is raised each
time); one whose overrides or config folders name this run's temporary folder (pytest's ``basetemp``: another folder
each run, so the key would never come again); and one whose search path holds configs registered in Python (hydra's
``ConfigStore``, beyond hydra's own), since their content has no file to hash. The folder is pytest's cache
(``.pytest_cache/d/verl-split-compose``, ``pytest --cache-clear`` empties it) and keeps the newest ``KEEP``
entries; without pytest's cache plugin nothing is kept. A fresh clone composes every config once, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

#: Entries kept (about 0.1 MB each); the oldest beyond are removed when a test process starts.
KEEP = 400
#: Strings that make a compose volatile: this run's temporary folder (``skip_containing``).
_VOLATILE: list[str] = []

#: What hydra itself registers in its ConfigStore; anything more is a structured config with no file to hash.
_HYDRA_OWN = {"hydra", "_dummy_empty_config_.yaml"}


def _folder_digest(folder: str) -> str:
    """A digest of every file under ``folder``: names and bytes (a few milliseconds for verl's config)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return digest.hexdigest()


def _key(args: tuple, kwargs: dict) -> str | None:
    import hydra
    import omegaconf
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    sources = GlobalHydra.instance().config_loader().get_sources()
    named = repr((args, kwargs, [source.path for source in sources]))  # a config folder in it counts too
    if set(ConfigStore.instance().repo) - _HYDRA_OWN or any(v in named for v in _VOLATILE):
        return None
    parts = [repr(args), repr(sorted(kwargs.items())), hydra.__version__, omegaconf.__version__]
    for source in sources:
        if source.scheme() == "file":
            parts.append(f"file:{source.path}:{_folder_digest(source.path)}")
        elif source.scheme() == "pkg":
            parts.append(f"pkg:{source.path}")
        else:  # "structured": the ConfigStore, checked above
            parts.append(source.scheme())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def skip_containing(text: str) -> None:
    """Do not keep composes whose arguments or config folders contain ``text`` (this run's temporary folder)."""
    _VOLATILE.append(text)


def _prune(folder: Path) -> None:
    entries = []
    for path in folder.glob("*.pickle"):
        with contextlib.suppress(FileNotFoundError):  # another xdist worker pruned it first
            entries.append((path.stat().st_mtime, path))
    for _, old in sorted(entries, reverse=True)[KEEP:]:
        old.unlink(missing_ok=True)


def install(folder: Path | None) -> None:
    """Wrap ``hydra.compose`` (which ``verl_split.tools.hydra_config`` imports at each call) with the cache."""
    import hydra

    if folder is None or hasattr(hydra.compose, "__wrapped__"):  # installed already
        return
    _prune(folder)
    compose = hydra.compose

    def cached_compose(*args: Any, **kwargs: Any) -> Any:
        key = _key(args, kwargs)
        if key is None:
            return compose(*args, **kwargs)
        path = folder / f"{key}.pickle"
        with contextlib.suppress(FileNotFoundError):  # not kept yet, or pruned by another worker just now
            os.utime(path)  # the newest are kept (_prune)
            return pickle.loads(path.read_bytes())
        config = compose(*args, **kwargs)
        # Written whole, then renamed: two xdist workers may compose the same config at once.
        with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".tmp") as file:
            pickle.dump(config, file)
        os.replace(file.name, path)
        return config

    cached_compose.__wrapped__ = compose  # type: ignore[attr-defined]
    hydra.compose = cached_compose
