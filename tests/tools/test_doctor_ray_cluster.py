"""``verl-split doctor --ray`` on a node where ``ray start`` runs: it joins the cluster as is.

Ray refuses ``ray.init(num_cpus=...)`` against an existing cluster (``ray/_private/worker.py:1936`` in
Ray 2.60), which is what doctor used to call. The test starts its own ``ray start --head`` cluster
(its own port and temporary folder, so no other Ray on this machine is touched or picked up) and
stops exactly that cluster again: the ``ray start --block`` process it started, then any process
left that names the cluster's temporary folder, by pid. Never ``ray stop``, which would stop every
Ray of the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.pyrun import clean_env

pytestmark = [pytest.mark.subprocess, pytest.mark.ray, pytest.mark.timeout(300)]

#: The test's cluster runs without Ray's token auth: Ray 2.60 turns it on for `ray start` when
#: ~/.ray/auth_token exists, and a client given the address (RAY_ADDRESS) does not pick the token up
#: (ray/_private/worker.py:1972-1976). Cluster and clients say the same, whatever this machine's ~/.ray holds.
NO_TOKEN = {"RAY_AUTH_MODE": "disabled"}

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_cluster(proc: subprocess.Popen, temp_dir: str) -> None:
    """Stop the cluster this test started, and only it."""
    import psutil

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # `ray start --block` stops the processes it started
        try:
            proc.wait(timeout=5)  # it takes ~30 s to stop gracefully: this cluster holds no work worth that
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    deadline = time.monotonic() + 5  # `ray start` has stopped what it tracks; the rest lingers, and is killed
    while True:
        left = []
        for candidate in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(temp_dir in part for part in candidate.info["cmdline"] or ()):
                    left.append(candidate)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1)
    for candidate in left:  # what ignored SIGTERM: this cluster's own processes, by pid
        with contextlib.suppress(psutil.NoSuchProcess):
            candidate.kill()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_start_cluster():
    """A ``ray start --head`` cluster with 1 CPU: (address, the ``ray start`` process)."""
    port = _free_port()
    # A short folder of its own: Ray's socket paths must stay under the kernel's 107 characters.
    temp_dir = tempfile.mkdtemp(prefix="vs-doctor-ray-", dir="/tmp")
    proc = subprocess.Popen(
        [
            RAY,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            "--block",
        ],
        env=clean_env(NO_TOKEN),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        _wait_until_up(address, proc)
        yield address, proc
    finally:
        _stop_cluster(proc, temp_dir)


#: Asks the cluster for its CPUs as a driver does.
_CPUS = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); print(ray.cluster_resources().get('CPU'))"


def _total_cpus(address: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _CPUS, address], env=clean_env(NO_TOKEN), capture_output=True, text=True, timeout=120
    )
    return proc.stdout.strip() if proc.returncode == 0 else f"error: {proc.stderr[-1500:]}"


def _wait_until_up(address: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    said = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ray start exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        said = _total_cpus(address)
        if said == "1.0":
            return
        time.sleep(2)
    raise AssertionError(f"the ray start cluster at {address} did not come up in {timeout:g}s: {said}")


def test_doctor_ray_joins_a_running_cluster_without_asking_it_for_resources(ray_start_cluster):
    address, server = ray_start_cluster
    assert _total_cpus(address) == "1.0"
    proc = subprocess.run(
        [sys.executable, "-m", "verl_split.tools.cli", "doctor", "--json", "--ray"],
        env=clean_env({"VERL_SPLIT": "1", "RAY_ADDRESS": address, **NO_TOKEN}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["supported"] is True and report["active"] is True and "runtime_env" in report["patches"]
    worker = report["ray_worker"]
    assert worker["pid"] != report["pid"] and worker["active"] is True, worker
    assert worker["patches"] == report["patches"]  # the worker patched what the launching process did
    # Ray names the cluster by the node's address, whatever host the test gave it.
    port = address.rsplit(":", 1)[1]
    joined = worker["ray_cluster"]
    assert joined.startswith("the running Ray cluster at ") and joined.endswith(
        f":{port}, joined without asking it for resources"
    ), joined
    assert f"verl-split doctor: Ray worker in {joined}" in proc.stderr  # and says so
    assert not any("could not run a Ray worker" in p for p in report["problems"]), report["problems"]
    # The cluster is as it was: still up (doctor did not shut it down), with the same resources.
    assert server.poll() is None
    assert _total_cpus(address) == "1.0"
