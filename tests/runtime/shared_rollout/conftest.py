"""The local Ray the shared-rollout tests on real Ray actors start, and the benchmarks' stand-in servers they use."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
from support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def local_ray():
    """A Ray of the test module's own; its workers can import the benchmarks' stand-ins by name."""
    ray = pytest.importorskip("ray")
    env = {"PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join([str(BENCHMARKS), *sys.path])}
    ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": env})
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def held_servers(local_ray):
    """``benchmarks/held_servers.py``: rollout servers held at their slots until a gate opens."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("held_servers")
    finally:
        sys.path.remove(str(BENCHMARKS))
