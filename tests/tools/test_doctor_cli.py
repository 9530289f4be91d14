"""``verl-split doctor`` run as a command: on a verl that cannot be imported (one clear line, the fix,
exit 1), and its JSON on this verl."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.pyrun import clean_env

pytestmark = pytest.mark.subprocess

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
        [sys.executable, "-m", "verl_split.tools.cli", "doctor", *args],
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


def test_doctor_json_on_this_verl_lists_every_feature_available():
    import json

    proc = subprocess.run(
        [sys.executable, "-m", "verl_split.tools.cli", "doctor", "--json"],
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
