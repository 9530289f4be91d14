"""Source distributions from PyPI for the ``network`` tests: downloaded once, checked, unpacked, never installed.

The URL and the sha256 of each sdist come from the index's JSON (``https://pypi.org/pypi/<name>/json``);
a mirror may give the file's URL relative to that JSON's. Used by ``tests/plugin/test_patches.py`` (verl's sdists)
and ``tests/project/test_gpu_smoke_sources.py`` (vLLM's and flash-attn's).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path

import pytest

PYPI_JSON = "https://pypi.org/pypi/{name}/json"


def download(name: str, releases: Iterable[str], folder: Path, why: str) -> dict[str, Path]:
    """Each release's sdist of ``name`` in ``folder``, its sha256 checked; skips the caller when PyPI is not
    reachable, saying ``why`` the tests need it."""
    url = PYPI_JSON.format(name=name)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            index = json.load(response)
        found = {}
        for release in releases:
            (entry,) = [f for f in index["releases"][release] if f["packagetype"] == "sdist"]
            with urllib.request.urlopen(urllib.parse.urljoin(url, entry["url"]), timeout=300) as response:
                data = response.read()
            assert hashlib.sha256(data).hexdigest() == entry["digests"]["sha256"], f"{entry['filename']}: bad sha256"
            found[release] = folder / entry["filename"]
            found[release].write_bytes(data)
    except (urllib.error.URLError, TimeoutError) as exc:
        pytest.skip(f"PyPI is not reachable ({exc}): {why}")
    return found


def unpack(sdist: Path, into: Path, only: tuple[str, ...] = ()) -> Path:
    """The sdist unpacked in ``into`` (made here); its top folder. ``only``: the paths inside that top folder
    to unpack (a path and everything under it), instead of the whole sdist."""
    into.mkdir(parents=True)
    # The data filter also makes the files ours, not the sdist's uid's (Python 3.10.12 on).
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(sdist) as tar:
        if only:  # one pass over the compressed stream
            for member in tar:
                if member.name.partition("/")[2].startswith(only):
                    tar.extract(member, into, **safe)
        else:
            tar.extractall(into, **safe)
    (root,) = into.iterdir()
    return root


def names(sdist: Path) -> list[str]:
    """Every path the sdist holds, relative to its top folder."""
    with tarfile.open(sdist) as tar:
        return [m.name.partition("/")[2] for m in tar.getmembers()]
