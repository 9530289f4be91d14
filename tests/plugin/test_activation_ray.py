"""The plugin is on inside Ray worker processes, not only in the launching one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.pyrun import clean_env, run_json

pytestmark = [pytest.mark.subprocess, pytest.mark.ray]

REPORT_FROM_ACTOR = """
import json, os, ray

@ray.remote(num_cpus=0)
class Probe:
    def report(self):
        import verl  # a verl worker imports verl, which loads verl-split's entry point
        from verl_split.plugin import activation
        return {"pid": os.getpid(), "active": activation.is_active(),
                "env": os.environ.get("VERL_SPLIT")}

def probe():
    actor = Probe.remote()
    return ray.get(actor.report.remote())
"""


def test_local_cluster_worker_is_active_when_launcher_set_verl_split():
    result = run_json(
        REPORT_FROM_ACTOR
        + """
ray.init(num_cpus=1, include_dashboard=False)
print(json.dumps({"driver": os.getpid(), "worker": probe()}))
""",
        env={"VERL_SPLIT": "1"},
    )
    assert result["worker"]["pid"] != result["driver"]
    assert result["worker"]["active"] is True


@pytest.fixture
def cluster_without_verl_split(monkeypatch):
    """A running Ray cluster whose raylet was started without VERL_SPLIT, as on a shared cluster."""
    from ray.cluster_utils import Cluster

    for key in [k for k in os.environ if k.startswith("VERL_SPLIT")]:
        monkeypatch.delenv(key)  # the raylet inherits this process's environment
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    yield cluster.address
    cluster.shutdown()


def test_existing_cluster_gets_verl_split_through_verls_runtime_env(cluster_without_verl_split):
    result = run_json(
        REPORT_FROM_ACTOR
        + f"""
import verl
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
address = {cluster_without_verl_split!r}

# Without verl's runtime_env the worker does not see VERL_SPLIT: the problem is real.
ray.init(address=address)
plain = probe()
ray.shutdown()

# verl's run_ppo passes get_ppo_ray_runtime_env() to ray.init; verl-split adds VERL_SPLIT* to it.
ray.init(address=address, runtime_env=get_ppo_ray_runtime_env())
forwarded = probe()
print(json.dumps({{"plain": plain, "forwarded": forwarded}}))
""",
        env={"VERL_SPLIT": "1"},
    )
    assert result["plain"]["active"] is False and result["plain"]["env"] is None
    assert result["forwarded"]["active"] is True and result["forwarded"]["env"] == "1"


@pytest.mark.extended(
    reason="doctor --json --ray's report, the worker's patches included: tests/tools/test_doctor_ray_cluster.py "
    "against a running cluster; a worker of a local Ray the launcher started: "
    "test_local_cluster_worker_is_active_when_launcher_set_verl_split"
)
def test_doctor_json_and_ray_after_plain_install():
    proc = subprocess.run(
        [sys.executable, "-m", "verl_split.tools.cli", "doctor", "--json", "--ray"],
        env=clean_env({"VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["verl_version"] and report["supported"] is True and report["active"] is True
    assert "runtime_env" in report["patches"]
    worker = report["ray_worker"]
    assert worker["pid"] != report["pid"] and worker["active"] is True
    assert worker["patches"] == report["patches"]


def test_doctor_reports_inactive_and_bad_values():
    off = subprocess.run(
        [sys.executable, "-m", "verl_split.tools.cli", "doctor", "--json"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert off.returncode == 0, off.stderr[-3000:]
    assert json.loads(off.stdout)["active"] is False
    bad = subprocess.run(
        [sys.executable, "-m", "verl_split.tools.cli", "doctor", "--json"],
        env=clean_env({"VERL_SPLIT": "perhaps"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1
    assert any("is not an accepted value" in p for p in json.loads(bad.stdout)["problems"])


FAILING_SEAM_IN_ACTOR = """
import json, time, ray

@ray.remote(num_cpus=0)
class Worker:
    def patch(self):
        import json as target
        import verl  # noqa: F401  (verl-split is on in this worker)
        from verl_split.plugin import activation
        from verl_split.core import compat
        # A seam whose module cannot be loaded: the unexpected-failure path of every seam.
        broken = activation.Seam(
            "broken", "json", "split", "placement", compat.ANY, apply="verl_split.no_such_seam:patch"
        )
        activation.apply(broken, target)

ray.init(num_cpus=1, include_dashboard=False)
try:
    ray.get(Worker.remote().patch.remote())
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
time.sleep(3)  # let Ray forward the worker's stderr to this console
print(json.dumps({"error": error}))
"""


def test_seam_failing_in_a_worker_reaches_the_drivers_console_with_its_traceback():
    proc = subprocess.run(
        [sys.executable, "-c", FAILING_SEAM_IN_ACTOR],
        env=clean_env({"VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    message = "could not patch json (seam 'broken')"
    # Ray takes the SystemExit for an actor exit; its death notice carries our message.
    assert error is not None and message in error, error
    console = proc.stdout + proc.stderr
    # The worker's log line, forwarded by Ray, carries the message and the traceback of the cause.
    assert f"verl-split: {message}" in console
    assert "Traceback" in console and "ModuleNotFoundError: No module named 'verl_split.no_such_seam'" in console
