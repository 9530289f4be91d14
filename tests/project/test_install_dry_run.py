"""``pip install verl-split`` into an environment that already runs verl installs verl-split alone: pip's own
resolution, for real, reported by ``pip install --dry-run --report``.

The environment is this test's interpreter (the project's ``.venv``: verl 0.9.1 and its requirements). The
wheel is built from this checkout first (``pip wheel``, which fetches hatchling into pip's isolated build
environment: the download that puts this file in the ``network`` tier); pip then resolves the wheel with its
dependencies, as a user's ``pip install verl-split`` would, and installs nothing (``--dry-run``). The old
GPU extras' lines resolve the same, since those extras are gone (tests/project/test_install_extras.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

from verl_split.core import compat

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(ROOT)]
    subprocess.run(pip, check=True, timeout=300)
    (built,) = out.glob("verl_split-*.whl")
    return built


def dry_run(requirement: str, report: Path) -> tuple[list[dict], str]:
    """What ``pip install requirement`` would install here: the report's entries, and pip's messages."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--report", str(report), requirement]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text())["install"], done.stdout + done.stderr


@pytest.mark.parametrize("extra", ["", "[gpu]", "[vllm]"])
def test_installing_into_verls_environment_installs_verl_split_alone(wheel, tmp_path, extra):
    assert compat.installed_version()  # the environment runs verl
    installs, messages = dry_run(f"verl-split{extra} @ {wheel.as_uri()}", tmp_path / "report.json")
    assert [(entry["metadata"]["name"], entry.get("requested")) for entry in installs] == [("verl-split", True)], [
        (entry["metadata"]["name"], entry["metadata"]["version"]) for entry in installs
    ]
    if extra:
        assert "does not provide the extra" in messages, messages[-2000:]
