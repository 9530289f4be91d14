"""Activation without ``verl.plugins`` entry points (verl 0.7/0.8): ``verl_split_activate.pth``.

Each check runs in a fresh interpreter, so that the start-up file runs as it does for users.
Checks that only make sense on one side of verl 0.9 skip, naming the installed verl.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from support.paths import ROOT
from support.pyrun import COUNT_ACTIVATIONS, run_json

from verl_split.core import compat

pytestmark = pytest.mark.subprocess

PTH = "verl_split_activate.pth"
VERSION = compat.installed_version() or "0"
ENTRY_POINTS = compat.has_entry_points()
needs_entry_points = pytest.mark.skipif(
    not ENTRY_POINTS, reason=f"verl {VERSION} has no verl.plugins entry points (0.9+ only)"
)
needs_startup_hook = pytest.mark.skipif(
    ENTRY_POINTS, reason=f"verl {VERSION} loads verl-split through its verl.plugins entry point"
)

# Runs the start-up file once more (as a virtual environment may, CPython issue 75723), counts
# how often the bootstrap switches verl-split on, then imports verl and reports.
REPORT = f"""
import importlib.resources, json, site, sys, sysconfig
purelib = sysconfig.get_paths()["purelib"]
site.addpackage(purelib, {PTH!r}, None)
site.addpackage(purelib, {PTH!r}, None)
finders_before = sum(type(f).__name__ == "VerlImportFinder" for f in sys.meta_path)
{COUNT_ACTIVATIONS}
import verl
import verl.utils.device as device
from verl_split.plugin.wrapping import layers
print(json.dumps({{
    "finders_before": finders_before,
    "finders_after": sum(type(f).__name__ == "VerlImportFinder" for f in sys.meta_path),
    "activations": len(calls),
    "active": activation.is_active(),
    "startup": "verl_split._startup" in sys.modules,
    "loader": type(verl.__loader__).__name__,
    "spec_loader": type(verl.__spec__.loader).__name__,
    "resources": importlib.resources.files("verl").joinpath("__init__.py").is_file(),
    "depth": layers(device.auto_set_device),
}}))
"""


def test_startup_file_is_installed_and_shipped_in_the_wheel(tmp_path):
    installed = Path(sysconfig.get_paths()["purelib"]) / PTH
    assert installed.read_text() == (ROOT / PTH).read_text(), "reinstall: pip install -e '.[test]'"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("verl_split-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert PTH in names  # at the root of site-packages, where site.py reads it
        assert zf.read(PTH).decode() == (ROOT / PTH).read_text()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "[verl.plugins]" in zf.read(entry_points).decode()


def test_unset_startup_file_imports_nothing():
    out = run_json(
        "import json, sys\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('verl_split')),"
        " [type(f).__name__ for f in sys.meta_path]]))"
    )
    assert out[0] == []
    assert "VerlImportFinder" not in out[1]


def test_bootstrap_runs_once_whatever_path_triggers_it():
    out = run_json(REPORT, env={"VERL_SPLIT": "1"})
    assert out["finders_before"] == 1  # the start-up file ran three times, one finder
    assert out["finders_after"] == 0
    assert out["activations"] == 1 and out["active"]
    assert out["depth"] == 1
    assert out["loader"] == out["spec_loader"] == "SourceFileLoader"
    assert out["resources"]


def test_bootstrap_named_in_verl_use_external_modules_runs_once_too():
    out = run_json(REPORT, env={"VERL_SPLIT": "1", "VERL_USE_EXTERNAL_MODULES": "verl_split._bootstrap"})
    assert out["activations"] == 1 and out["active"] and out["depth"] == 1


@needs_startup_hook
def test_old_verl_activates_through_the_startup_file():
    out = run_json(REPORT, env={"VERL_SPLIT_CPU": "1"})
    assert out["startup"] and out["active"] and out["activations"] == 1


@needs_entry_points
def test_entry_point_stays_the_path_and_verls_plugin_policy_wins():
    on = run_json(REPORT, env={"VERL_SPLIT": "1"})
    assert on["active"] and on["activations"] == 1
    # verl's own switch for entry points; the start-up file does not go around it.
    off = run_json(REPORT, env={"VERL_SPLIT": "1", "VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert not off["active"] and off["activations"] == 0 and off["depth"] == 0
