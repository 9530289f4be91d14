"""``benchmarks/control_plane_tail.py`` at a small size, as its command runs it: every arm serves every request
once, with the step's weights, and each step's floor is there.

256 requests on 3 + 1 stand-in servers running 16 at once, one repetition. It asserts no figure of time but that
each was measured. Behind ``--extended``: its actors (ten processes, each importing verl) take minutes on a busy
2-core machine, and the path it adds beside the default suite's (the migration on Ray,
``tests/runtime/shared_rollout/test_migration_ray.py``) is the benchmark's own loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import ROOT

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(900)]

ARMS = ("verl", "late_join", "longest_first", "migrate", "shared_from_start")


@pytest.mark.extended(reason="the migration's path runs on Ray in tests/runtime/shared_rollout/test_migration_ray.py")
def test_every_arm_serves_every_request_once_and_reports_its_floor(tmp_path):
    out = tmp_path / "tail.json"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "control_plane_tail.py"),
        *("--requests", "256", "--repeats", "1", "--hybrid", "3", "--shared", "1", "--max-num-seqs", "16"),
        *("--scale", "0.2", "--moves-per-server", "4", "--limit-s", "300", "--json", str(out)),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=840, env=os.environ.copy())
    assert done.returncode == 0, f"the benchmark failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    figures = json.loads(out.read_text())
    assert sorted(row["arm"] for row in figures["steps"]) == sorted(ARMS)
    for row in figures["steps"]:
        assert (row["lost"], row["served_twice"], row["stale_weights"]) == (0, 0, 0), row["arm"]
        assert row["floor_s"] > 0 and row["advice"] in ("join", "migrate", "nothing")
    by_arm = {row["arm"]: row for row in figures["steps"]}
    assert by_arm["verl"]["critic_pool_share"] == 0.0
    assert by_arm["shared_from_start"]["critic_pool_share"] > 0.0
    assert "open_call_s" in by_arm["late_join"] and "migrate_call_s" in by_arm["migrate"]
