"""``verl-split doctor`` on a verl that cannot be imported: one clear line, the fix, exit 1."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from pyrun import clean_env

# What a fresh `pip install verl==0.7.1` got: pyarrow 26 built for numpy 2 beside verl's numpy<2.
# The real verl is imported; only its numpy dependency is swapped for one that fails as that did.
BROKEN_NUMPY = (
    'raise ImportError("A module that was compiled using NumPy 1.x cannot be run in NumPy 2.0.0 as it may crash.")\n'
)


def doctor(tmp_path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    shadow = tmp_path / "shadow"
    (shadow / "numpy").mkdir(parents=True)
    (shadow / "numpy" / "__init__.py").write_text(BROKEN_NUMPY)
    return subprocess.run(
        [sys.executable, "-m", "verl_split.cli", "doctor", *args],
        env=clean_env({"PYTHONPATH": str(shadow), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_unimportable_verl_is_one_line_with_the_fix(tmp_path):
    proc = doctor(tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    (problem,) = [line for line in proc.stdout.splitlines() if line.strip().startswith("problem")]
    assert "is installed but `import verl` fails (ImportError: A module that was compiled using NumPy 1.x" in problem
    assert "python -m pip check" in problem and "pip install 'pyarrow<26'" in problem
    assert proc.stderr.startswith("NOT healthy: verl ")


def test_unimportable_verl_with_verl_split_on_is_reported_too(tmp_path):
    proc = doctor(tmp_path, "--json", env={"VERL_SPLIT": "1"})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "`import verl` fails (ImportError" in proc.stdout


# The source patches of patches/ (tests/test_patches.py runs them on real, patched verl trees).


@pytest.mark.unit
def test_doctor_text_shows_the_patches_and_who_loaded_verl_split(capsys):
    from verl_split import doctor, patches

    report = {
        "pid": 1,
        "verl_split_version": "0",
        "verl_version": "0.7.1",
        "supported_verl": "0.7.x",
        "ray_version": "2",
        "supported": True,
        "active": True,
        "features": ["split"],
        "patches": [],
        "pending_patches": [],
        "loaded_by": patches.BY_VERL,
        "verl_patches": {patches.PLUGIN_LOADER: "patched", patches.PER_NODE_FIT: "yes", patches.BATCH_PER_POOL: "no"},
        "problems": [],
    }
    doctor._print_text(report, "this process")
    lines = capsys.readouterr().out.splitlines()
    assert f"  loaded by         {patches.BY_VERL}" in lines
    assert (
        "  verl patches      plugin-entry-points: patched (this verl loads verl.plugins entry points: "
        "no start-up file needed)" in lines
    )
    assert "                    per-node-fit: yes" in lines and "                    batch-per-pool: no" in lines


@pytest.mark.unit
def test_the_loader_is_told_by_feature_when_the_version_says_no(monkeypatch):
    from verl_split import compat, patches

    monkeypatch.setattr(compat, "has_entry_points", lambda: False)  # a 0.7/0.8 distribution
    patched, stock = types.ModuleType("verl"), types.ModuleType("verl")
    patched._plugins_policy = "auto"  # what verl 0.9's loader (and the backport) leaves behind
    assert patches.loads_entry_points(patched) and not patches.loads_entry_points(stock)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("imported_by", "expected"),
    [("verl", "BY_VERL"), ("startup", "BY_STARTUP_HOOK"), ("other", "BY_OTHER"), (None, None)],
)
def test_loaded_by_names_who_imported_the_bootstrap(monkeypatch, imported_by, expected):
    from verl_split import patches

    if imported_by is None:
        monkeypatch.delitem(sys.modules, "verl_split._bootstrap", raising=False)
    else:
        bootstrap = types.ModuleType("verl_split._bootstrap")
        bootstrap.IMPORTED_BY = imported_by
        monkeypatch.setitem(sys.modules, "verl_split._bootstrap", bootstrap)
    assert patches.loaded_by() == (getattr(patches, expected) if expected else None)


@pytest.mark.unit
def test_doctor_lists_each_feature_with_the_preflights_reason(capsys):
    from verl_split import doctor

    reason = "shared rollout needs verl's verl.workers.rollout.llm_server:GlobalRequestLoadBalancer (...)"
    report = {
        "pid": 1,
        "verl_split_version": "0",
        "verl_version": "0.10.0.dev0",
        "supported_verl": "0.7.x, 0.8.x, 0.9.x",
        "tested": False,
        "ray_version": "2",
        "supported": True,
        "active": True,
        "features": ["split"],
        "preflight": {
            "placement": {"label": "split placement", "available": True, "on": True, "reason": ""},
            "shared_rollout": {"label": "shared rollout", "available": False, "on": False, "reason": reason},
        },
        "patches": [],
        "pending_patches": [],
        "loaded_by": None,
        "verl_patches": {},
        "problems": [],
    }
    doctor._print_text(report, "this process")
    lines = capsys.readouterr().out.splitlines()
    untested = "untested: newer than the tested releases"
    assert f"  verl              0.10.0.dev0  (supported: 0.7.x, 0.8.x, 0.9.x; {untested})" in lines
    assert "  features          split placement         available, on" in lines
    assert "                    shared rollout          NOT available, off" in lines
    assert f"                      {reason}" in lines


def test_doctor_json_on_this_verl_lists_every_feature_available():
    import json

    proc = subprocess.run(
        [sys.executable, "-m", "verl_split.cli", "doctor", "--json"],
        env=clean_env({"VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["supported"] and report["healthy"] and report["tested"]
    assert {"placement", "updates", "prep", "cpu"} <= set(report["preflight"])
    assert all(f["available"] for f in report["preflight"].values()), report["preflight"]
    assert report["preflight"]["placement"]["on"] and not report["preflight"]["cpu"]["on"]
