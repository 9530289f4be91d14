"""The preflight on the real path: ``python -m verl.trainer.main_ppo`` over a copy of verl with one method
renamed stops with the preflight's one line before Ray starts; the same feature switched off runs without
its seam; a verl newer than the tested releases runs with one "untested" line, or is refused with the
reason. The checks themselves, in this process: test_preflight.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.families import VERSION
from support.pyrun import clean_env, run_json

from verl_split.core import compat
from verl_split.plugin import verl_source

pytestmark = pytest.mark.subprocess

ROOTS = verl_source.verl_roots()


def broken_verl_copy(tmp_path: Path, module: str, name: str) -> Path:
    """A copy of the installed verl package with ``def name`` renamed in ``module``."""
    root = tmp_path / "verl_copy"
    shutil.copytree(ROOTS[0] / "verl", root / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    assert f"def {name}(" in text
    path.write_text(text.replace(f"def {name}(", f"def {name}_renamed("))
    return root


#: The update overlap's wrapped method on the default trainer of this family.
if compat.has_v1_trainer():
    UPDATE_SEAM, UPDATE_MODULE = "overlap_v1", "verl.trainer.ppo.v1.trainer_base"
    UPDATE_SYMBOL = "verl.trainer.ppo.v1.trainer_base:PPOTrainer._update_critic"
else:
    UPDATE_SEAM = "overlap_legacy" if compat.has_legacy_workers() else "overlap_v0"
    UPDATE_MODULE = "verl.trainer.ppo.ray_trainer"
    UPDATE_SYMBOL = "verl.trainer.ppo.ray_trainer:RayPPOTrainer._update_critic"


def test_main_ppo_stops_before_ray_naming_the_renamed_method(tmp_path):
    root = broken_verl_copy(tmp_path, UPDATE_MODULE, "_update_critic")
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "trainer.n_gpus_per_node=2"],
        env=clean_env({"PYTHONPATH": str(root), "VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("verl-split: ")][-1:]
    assert line.startswith(f"verl-split: overlapped updates needs verl's {UPDATE_SYMBOL} (seam {UPDATE_SEAM})")
    assert "has no '_update_critic'" in line and "VERL_SPLIT_OVERLAP=prep" in line
    assert "Traceback" not in proc.stderr
    assert "Started a local Ray instance" not in proc.stdout + proc.stderr


def test_the_feature_switched_off_runs_without_its_seam(tmp_path):
    root = broken_verl_copy(tmp_path, UPDATE_MODULE, "_update_critic")
    seen = run_json(
        f"""
import json, importlib, verl
from verl_split.plugin import activation
importlib.import_module({UPDATE_MODULE!r})
print(json.dumps({{"skipped": activation.skipped_patches(), "applied": activation.applied_patches()}}))
""",
        env={"PYTHONPATH": str(root), "VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "prep"},
    )
    assert UPDATE_SEAM in seen["skipped"] and UPDATE_SEAM not in seen["applied"]
    assert any(name.startswith("prep_") for name in seen["applied"])


@pytest.fixture
def newer_verl(tmp_path):
    """Distribution metadata claiming verl 0.10.0, before the real one: a verl newer than the tested ones."""
    dist = tmp_path / "meta" / "verl-0.10.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.10.0\n")
    return tmp_path / "meta"


#: A newer version faked over verl 0.7/0.8's code: the start-up hook leaves loading to verl, which has no
#: entry-point loader there. No real verl is like that (verl loads entry points since 0.9).
needs_entry_points = pytest.mark.skipif(
    not compat.has_entry_points(), reason=f"verl {VERSION} has no entry-point loader for a faked newer version"
)


@needs_entry_points
def test_a_newer_verl_runs_with_one_untested_line_when_the_preflight_passes(newer_verl):
    code = "import verl; from verl_split.plugin import activation; print(activation.is_active())"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env({"PYTHONPATH": str(newer_verl), "VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"
    (line,) = [line for line in proc.stderr.splitlines() if "untested" in line]
    assert "verl 0.10.0 is newer than the releases verl-split is tested on" in line


@needs_entry_points
def test_a_newer_verl_that_moved_a_seam_is_refused_with_the_reason(newer_verl, tmp_path):
    root = broken_verl_copy(tmp_path, UPDATE_MODULE, "_update_critic")
    proc = subprocess.run(
        [sys.executable, "-c", "import verl"],
        env=clean_env({"PYTHONPATH": f"{newer_verl}:{root}", "VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode != 0
    assert f"overlapped updates needs verl's {UPDATE_SYMBOL}" in proc.stderr
    assert "on verl 0.10.0 " in proc.stderr and "Traceback" not in proc.stderr
