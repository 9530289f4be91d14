"""``benchmarks/control_plane.py`` at a small size, on a real local Ray: every arm runs, no request is lost, served
twice or served by stale weights, and the late join's path is taken (the join forced: ``--join always``).

The benchmark's own stand-ins (its rollout servers and agent-loop workers have no CPU path here); verl's balancer,
verl-split's balancer, checkpoint manager and late join are the real ones. 128 requests on servers of one sequence
(24 slots on the actor pool), so requests queue and the critic pool has some to take; a mean response of 0.25 s.
Every wait in the benchmark has a limit (``--limit-s``): a hang fails here instead of holding CI. Its figures are
timings on a busy machine and are not asserted.
"""

from __future__ import annotations

import importlib
import json
import sys

import pytest
from support.paths import ROOT

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture
def benchmark():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("control_plane")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_every_arm_serves_every_request_once_with_the_step_s_weights_and_the_join_is_taken(benchmark, tmp_path):
    out = tmp_path / "control_plane.json"
    args = ["--requests", "128", "--mean-s", "0.25", "--max-num-seqs", "1", "--push-s", "0.05", "--repeats", "1"]
    assert benchmark.main([*args, "--join", "always", "--limit-s", "60", "--no-planner", "--json", str(out)]) == 0
    steps = json.loads(out.read_text())["steps"]
    assert sorted(row["arm"] for row in steps) == sorted(benchmark.ARMS)
    for row in steps:
        assert (row["lost"], row["served_twice"], row["stale_weights"]) == (0, 0, 0), row["arm"]
    by_arm = {row["arm"]: row for row in steps}
    late = by_arm["late_join"]
    assert late["happened"]["outcome"] == "joined" and late["push_s"] is not None and late["open_call_s"] is not None
    # Parked all step, the critic pool took nothing; open from the start, verl's routing spread the step over it.
    assert by_arm["stock"]["critic_pool_share"] == 0.0 and by_arm["gate"]["critic_pool_share"] == 0.0
    assert by_arm["shared_from_start"]["critic_pool_share"] > 0.0
