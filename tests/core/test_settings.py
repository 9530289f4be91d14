"""Settings: the one "off" policy, settings frozen at activation, the logger, versions from compat.

Unit tests: no process, no Ray, no verl trainer. The same policy through ``import verl``
on the installed family (entry point on 0.9, start-up hook on 0.7/0.8): test_off_policy.py.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from verl_split import seam_catalogue
from verl_split.core import compat, log, settings
from verl_split.core.errors import ActivationFailed, SettingsError, activation_failed
from verl_split.plugin import activation

pytestmark = pytest.mark.unit


def test_off_reads_nothing_but_the_switches():
    # A leftover value of a known variable does not matter while verl-split is off.
    assert settings.read({"VERL_SPLIT_OVERLAP": "maybe"}) == settings.Settings()
    assert settings.read({"VERL_SPLIT": "0", "VERL_SPLIT_OVERLAP": "maybe", "VERL_SPLIT_PLACEMENT": "x"}) == (
        settings.Settings()
    )


@pytest.mark.parametrize("name", ["VERL_SPLITT", "VERL_SPLIT_CPUU", "VERL_SPLIT_OVERLAPP"])
def test_unknown_name_is_an_error_on_or_off(name):
    for env in ({name: "1"}, {name: "1", "VERL_SPLIT": "1"}, {name: "1", "VERL_SPLIT": "0"}):
        with pytest.raises(SettingsError, match=f"unknown variable {name}; verl-split reads only VERL_SPLIT,"):
            settings.read(env)


@pytest.mark.parametrize("name", ["VERL_SPLIT", "VERL_SPLIT_CPU"])
def test_a_switch_must_hold_an_on_off_value(name):
    with pytest.raises(SettingsError, match=f"{name}='maybe' is not an accepted value"):
        settings.read({name: "maybe"})


@pytest.mark.parametrize(
    ("value", "on"),
    [(v, True) for v in ("1", "true", "YES", "On")] + [(v, False) for v in ("0", "false", "No", "off", "")],
)
def test_every_spelling_of_the_switch(value, on):
    # Every accepted spelling, in any case; test_activation.py checks two of each through `import verl`.
    assert settings.read({"VERL_SPLIT": value}).enabled is on
    assert settings.read({"VERL_SPLIT_CPU": value}).cpu is on


def test_on_validates_every_value():
    with pytest.raises(SettingsError, match="VERL_SPLIT_OVERLAP='maybe'"):
        settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "maybe"})
    with pytest.raises(SettingsError, match="VERL_SPLIT_OVERLAP='maybe'"):
        settings.read({"VERL_SPLIT_CPU": "1", "VERL_SPLIT_OVERLAP": "maybe"})
    on = settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "updates", "VERL_SPLIT_TRACE": "t.json"})
    assert on.enabled and on.overlap and not on.overlap_prep and on.trace_path == "t.json"


@pytest.mark.parametrize(
    ("value", "late_join", "always"),
    [(None, None, False), ("auto", None, False), ("on", True, False), ("off", False, False), ("Always", True, True)],
)
def test_late_join_values(value, late_join, always):
    env = {"VERL_SPLIT": "1", **({"VERL_SPLIT_LATE_JOIN": value} if value is not None else {})}
    read = settings.read(env)
    assert (read.late_join, read.late_join_always) == (late_join, always)


def test_a_bad_late_join_value_names_every_accepted_one():
    with pytest.raises(SettingsError, match=r"VERL_SPLIT_LATE_JOIN='sometimes'.*auto.*on.*off.*always"):
        settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_LATE_JOIN": "sometimes"})


def test_rollout_watchdog_seconds():
    assert settings.read({"VERL_SPLIT": "1"}).rollout_watchdog_s == settings.ROLLOUT_WATCHDOG_S
    assert settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_ROLLOUT_WATCHDOG_S": "45.5"}).rollout_watchdog_s == 45.5
    assert settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_ROLLOUT_WATCHDOG_S": "0"}).rollout_watchdog_s == 0.0
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(SettingsError, match=f"VERL_SPLIT_ROLLOUT_WATCHDOG_S='{bad}' is not a number of seconds"):
            settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_ROLLOUT_WATCHDOG_S": bad})


def test_settings_are_frozen_at_activation(monkeypatch):
    frozen = settings.read({"VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "prep"})
    settings.freeze(frozen)
    # A variable set mid-run (even a bad one) changes nothing the adapters read.
    monkeypatch.setenv("VERL_SPLIT_OVERLAP", "maybe")
    monkeypatch.setenv("VERL_SPLITT", "1")
    assert settings.current() is frozen
    assert not settings.current().overlap and settings.current().overlap_prep


def test_the_runtime_reads_the_frozen_settings():
    """Code that runs inside verl's processes (runtime/, the planner) reads ``settings.current()``, frozen at
    activation, never the environment: a variable changed mid-run changes nothing (settings.py says why)."""
    package = Path(settings.__file__).resolve().parents[1]
    readers = []
    for folder in ("runtime", "placement"):
        for path in (package / folder).rglob("*.py"):
            text = path.read_text()
            if "settings.read(" in text or re.search(r"environ[^\n]*[\"']VERL_SPLIT", text):
                readers.append(str(path.relative_to(package)))
    assert readers == [], f"runtime modules reading VERL_SPLIT* themselves: {readers}"


@pytest.fixture
def clean_logging(monkeypatch):
    ours = logging.getLogger("verl_split")
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(ours, "level", logging.NOTSET)
    monkeypatch.setattr(ours, "propagate", True)
    return ours


def test_logger_leaves_the_applications_logging_alone(clean_logging, caplog):
    root = logging.getLogger()
    assert root.handlers  # pytest's caplog handler is on the root logger
    log.configure()
    assert clean_logging.propagate  # the app's handlers see our records, and ours stays silent
    with caplog.at_level(logging.INFO):
        logging.getLogger("verl_split").info("Actor update completed in 5.2s")
    assert "Actor update completed in 5.2s" in caplog.text
    assert not _written_by_ours(clean_logging, logging.INFO)


def test_logger_level_set_by_the_application_wins(clean_logging):
    clean_logging.setLevel(logging.ERROR)
    log.configure()
    assert clean_logging.level == logging.ERROR


def test_logger_gets_a_console_handler_only_without_root_handlers(clean_logging, monkeypatch):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    log.configure()
    log.configure()
    assert [h.name for h in clean_logging.handlers] == ["verl_split_console"]
    assert clean_logging.level == logging.INFO and clean_logging.propagate


def test_logger_writes_its_own_lines_where_the_root_s_handlers_show_errors_only(clean_logging, monkeypatch):
    """Importing vLLM, after verl-split configured its logger, raises the root's stderr handler to ERROR: our INFO
    lines are then written by our handler; the errors still by the root's alone."""
    root_handler = logging.StreamHandler()
    monkeypatch.setattr(logging.getLogger(), "handlers", [root_handler])
    log.configure()
    assert not _written_by_ours(clean_logging, logging.INFO)
    root_handler.setLevel(logging.ERROR)
    assert _written_by_ours(clean_logging, logging.INFO)
    assert not _written_by_ours(clean_logging, logging.ERROR)


def _written_by_ours(logger: logging.Logger, level: int) -> bool:
    import io

    (ours,) = [h for h in logger.handlers if h.name == "verl_split_console"]
    stream = io.StringIO()
    ours.setStream(stream)
    ours.handle(logger.makeRecord(logger.name, level, __file__, 0, "a line", (), None))
    return stream.getvalue() != ""


def test_unexpected_activation_failure_logs_its_traceback(caplog):
    with caplog.at_level(logging.ERROR, logger="verl_split"):
        try:
            raise KeyError("train_mini_batch")
        except KeyError:
            exc = activation_failed("could not patch x", unexpected=True)
    assert isinstance(exc, ActivationFailed) and exc.code == "verl-split: could not patch x"
    (record,) = caplog.records
    assert record.exc_info and record.exc_info[0] is KeyError


def test_versions_are_specifier_sets_read_from_the_distribution():
    version = compat.installed_version()
    assert compat.has_entry_points() == compat.has_v1_trainer() == compat.ENTRY_POINTS.contains(version)
    assert compat.has_legacy_workers() == (compat.family_of(version) == "0.7")
    assert compat.family_of("0.9.1") == "0.9" and compat.family_of("0.10.0rc1") == "0.10"
    for seam in seam_catalogue.SEAMS:
        assert isinstance(seam.verl, SpecifierSet), seam.name
    # every family has the seams of each feature it needs, and no two trainers' placement seams
    seam_catalogue.install()
    for family in compat.SUPPORTED_FAMILIES:
        names = {s.name for s in activation.seams_for(frozenset({"split"}), family)}
        assert ("placement_v1" in names) == (family == "0.9") and ("placement_legacy" in names) != (family == "0.9")
        assert ("legacy_dispatch" in names) == (family == "0.7")


def test_stream_and_cpu_tail_settings():
    on = {"VERL_SPLIT_CPU": "1"}
    assert settings.read(on).stream_values is True
    assert settings.read(on).cpu_lengths == "fixed" and settings.read(on).cpu_hold_after == 0
    asked = {"VERL_SPLIT_STREAM_VALUES": "off", "VERL_SPLIT_CPU_LENGTHS": "Long_Tail", "VERL_SPLIT_CPU_HOLD_AFTER": "3"}
    read = settings.read({**on, **asked})
    assert (read.stream_values, read.cpu_lengths, read.cpu_hold_after) == (False, "long_tail", 3)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("VERL_SPLIT_STREAM_VALUES", "maybe", "switch it on"),
        ("VERL_SPLIT_CPU_LENGTHS", "short", "fixed or long_tail"),
        ("VERL_SPLIT_CPU_HOLD_AFTER", "-1", "whole number"),
        ("VERL_SPLIT_CPU_HOLD_AFTER", "two", "whole number"),
    ],
)
def test_stream_and_cpu_tail_bad_values(name, value, says):
    with pytest.raises(SettingsError, match=says):
        settings.read({"VERL_SPLIT_CPU": "1", name: value})
