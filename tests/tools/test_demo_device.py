"""``verl-split demo --device cuda`` as a user runs it, on a machine without a GPU: refused at once, in one line.

A fresh ``verl-split`` process (the console script), as the command line starts it: the check comes before
anything is made or started (no output folder, no assets, no Ray). Its time is bounded by the limit on the
process only (a hang guard); it took 1.6 s on this 2-core machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU"),
]


def test_without_a_gpu_the_demo_on_cuda_exits_2_with_one_line_naming_cuda(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run(
        [Path(sys.executable).with_name("verl-split"), "demo", "--device", "cuda", "--compare", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("verl-split demo: --device cuda: torch ") and "sees no CUDA GPU here" in line
    assert "Traceback" not in done.stderr
    assert not out.exists()  # nothing made before the check
