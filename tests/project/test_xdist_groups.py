"""Tests run on two xdist workers (``-n 2 --dist loadgroup``: make test's unit tier, any tier by hand): what must
stay together does, and each worker's Ray keeps to a folder of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import ROOT
from support.xdist_groups import SHARED_RUN_FILES, group_of, ray_folder

from verl_split.dryrun.recipe import ray_temp_dir

pytestmark = pytest.mark.unit


def test_a_files_tests_stay_on_one_worker_and_unit_tests_spread():
    demo = Path("tests/e2e/test_demo_e2e.py")
    assert group_of(demo, {"e2e"}) == group_of(demo, {"e2e", "extended"}) == demo.as_posix()
    assert group_of(Path("tests/core/test_settings.py"), {"unit"}) is None


def test_each_worker_has_a_ray_folder_of_its_own_and_the_dry_run_follows_it(monkeypatch):
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    gw1 = ray_folder("gw1")
    assert ray_folder("gw0") != gw1 == "/tmp/ray_gw1" and ray_folder(None) is None
    monkeypatch.setenv("RAY_TMPDIR", gw1)
    assert ray_temp_dir().startswith(gw1 + "/")
    monkeypatch.delenv("RAY_TMPDIR")
    assert ray_temp_dir() == "/tmp/ray_verl_split"


def test_a_checkout_started_with_its_own_ray_tmpdir_keeps_its_workers_under_it(monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", "/tmp/h1")
    assert ray_folder("gw0") == "/tmp/h1/ray_gw0"


def test_the_files_sharing_a_session_run_are_one_group():
    shared = ("halves_split_run", "shared_rollout_run", "example_run")  # the session-scoped runs of tests/conftest.py
    users = {p.name for p in (ROOT / "tests").rglob("test_*.py") if any(run in p.read_text() for run in shared)}
    users.discard(Path(__file__).name)
    assert users == SHARED_RUN_FILES
    assert {group_of(Path("tests/e2e") / name, {"e2e"}) for name in users} == {"shared_run"}
