"""``verl-split doctor``'s report (verl_split/tools/doctor.py), made in this process: the patches, who loaded
verl-split, each feature with the preflight's reason. Run as a command: test_doctor_cli.py."""

from __future__ import annotations

import sys
import types

import pytest

pytestmark = pytest.mark.unit

# The source patches of patches/ (tests/plugin/test_patches.py runs them on real, patched verl trees).


def test_doctor_text_shows_the_patches_and_who_loaded_verl_split(capsys):
    from verl_split.plugin import source_patches
    from verl_split.tools import doctor

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
        "loaded_by": source_patches.BY_VERL,
        "verl_patches": {
            source_patches.PLUGIN_LOADER: "patched",
            source_patches.PER_NODE_FIT: "yes",
            source_patches.BATCH_PER_POOL: "no",
        },
        "problems": [],
    }
    doctor.print_text(report, "this process")
    lines = capsys.readouterr().out.splitlines()
    assert f"  loaded by         {source_patches.BY_VERL}" in lines
    assert (
        "  verl patches      plugin-entry-points: patched (this verl loads verl.plugins entry points: "
        "no start-up file needed)" in lines
    )
    assert "                    per-node-fit: yes" in lines
    # A patch not applied reads as what it is, an option, just above "healthy".
    optional = "batch-per-pool: no (optional, for source builds: verl-split checks this itself)"
    assert f"{'':<20}{optional}" in lines


def test_doctor_says_how_to_switch_verl_split_on_when_it_is_off(capsys):
    from verl_split.tools import doctor

    report = {"pid": 1, "verl_split_version": "0", "verl_version": "0.9.1", "supported_verl": "0.7-0.9"}
    report.update({"ray_version": "2", "supported": True, "active": False, "features": [], "patches": []})
    report.update({"pending_patches": [], "loaded_by": None, "problems": [], "settings": {"enabled": False}})
    doctor.print_text(report, "this process")
    out = capsys.readouterr().out
    assert "  active            no (off: verl runs stock; set VERL_SPLIT=1 to switch verl-split on)" in out
    doctor.print_text({**report, "settings": {"enabled": True}}, "this process")  # asked for, not on: no hint
    assert "  active            no\n" in capsys.readouterr().out


def test_the_loader_is_told_by_feature_when_the_version_says_no(monkeypatch):
    from verl_split.core import compat
    from verl_split.plugin import source_patches

    monkeypatch.setattr(compat, "has_entry_points", lambda: False)  # a 0.7/0.8 distribution
    patched, stock = types.ModuleType("verl"), types.ModuleType("verl")
    patched._plugins_policy = "auto"  # what verl 0.9's loader (and the backport) leaves behind
    assert source_patches.loads_entry_points(patched) and not source_patches.loads_entry_points(stock)


@pytest.mark.parametrize(
    ("imported_by", "expected"),
    [("verl", "BY_VERL"), ("startup", "BY_STARTUP_HOOK"), ("other", "BY_OTHER"), (None, None)],
)
def test_loaded_by_names_who_imported_the_bootstrap(monkeypatch, imported_by, expected):
    from verl_split.plugin import source_patches

    if imported_by is None:
        monkeypatch.delitem(sys.modules, "verl_split._bootstrap", raising=False)
    else:
        bootstrap = types.ModuleType("verl_split._bootstrap")
        bootstrap.IMPORTED_BY = imported_by
        monkeypatch.setitem(sys.modules, "verl_split._bootstrap", bootstrap)
    assert source_patches.loaded_by() == (getattr(source_patches, expected) if expected else None)


def test_doctor_lists_each_feature_with_the_preflights_reason(capsys):
    from verl_split.tools import doctor

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
    doctor.print_text(report, "this process")
    lines = capsys.readouterr().out.splitlines()
    untested = "untested: newer than the tested releases"
    assert f"  verl              0.10.0.dev0  (supported: 0.7.x, 0.8.x, 0.9.x; {untested})" in lines
    assert "  features          split placement         available, on" in lines
    assert "                    shared rollout          NOT available, off" in lines
    assert f"                      {reason}" in lines
