"""The Chrome-trace timeline: appended per flush, valid JSON after each, in monotonic microseconds."""

from __future__ import annotations

import json

import pytest

from verl_split.runtime.metrics.timeline import Timeline

pytestmark = pytest.mark.unit


def events(path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def test_each_flush_appends_and_leaves_valid_json(tmp_path):
    path = tmp_path / "trace" / "timeline.json"
    timeline = Timeline(str(path))
    timeline.add("update_actor", "actor_rollout_ref_pool", 10.0, 10.5)
    timeline.flush()
    first = path.read_text()
    assert [e["ph"] for e in events(path)] == ["M", "X"]

    timeline.add("update_critic", "critic_pool", 10.1, 10.3)
    timeline.add("update_actor", "actor_rollout_ref_pool", 11.0, 11.25, step=2)
    timeline.flush()
    second = path.read_text()
    # The earlier events stay byte for byte; only the closing bracket moved.
    assert second.startswith(first[: first.rindex("]")].rstrip())
    found = events(path)
    assert [(e["ph"], e["name"]) for e in found] == [
        ("M", "process_name"),
        ("X", "update_actor"),
        ("M", "process_name"),
        ("X", "update_critic"),
        ("X", "update_actor"),
    ]
    last = found[-1]
    assert last["ts"] == pytest.approx(11.0e6) and last["dur"] == pytest.approx(0.25e6) and last["args"] == {"step": 2}
    assert {e["pid"] for e in found if e["name"] == "update_actor"} == {1}


def test_an_empty_flush_writes_nothing_new(tmp_path):
    path = tmp_path / "timeline.json"
    timeline = Timeline(str(path))
    timeline.flush()
    assert events(path) == []
    timeline.add("a", "lane", 1.0, 2.0)
    timeline.flush()
    timeline.flush()
    assert len(events(path)) == 2


def test_a_new_timeline_replaces_what_a_previous_run_left(tmp_path):
    path = tmp_path / "timeline.json"
    path.write_text("not json at all")
    timeline = Timeline(str(path))
    timeline.add("a", "lane", 1.0, 2.0)
    timeline.flush()
    assert len(events(path)) == 2


def test_a_file_cut_before_its_closing_bracket_still_holds_every_event(tmp_path):
    # What a crash between the write of the events and the tail leaves: Chrome accepts a missing ']'.
    path = tmp_path / "timeline.json"
    timeline = Timeline(str(path))
    for step in range(3):
        timeline.add("u", "lane", step, step + 0.5)
        timeline.flush()
    text = path.read_text()
    cut = text[: text.rindex("]")]
    assert len(json.loads(cut + "]}")["traceEvents"]) == 4


def test_an_unwritable_trace_turns_the_timeline_off_and_the_step_goes_on(tmp_path, monkeypatch, caplog):
    from verl_split.core import settings
    from verl_split.runtime.overlap import lanes

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    path = blocker / "timeline.json"  # its folder is a file: every write fails
    monkeypatch.setenv("VERL_SPLIT", "1")
    monkeypatch.setenv("VERL_SPLIT_TRACE", str(path))
    settings.thaw()
    monkeypatch.setattr(lanes, "_unwritable", set())
    with caplog.at_level("INFO", logger="verl_split"):
        lanes.record_interval("update_actor", "actor_rollout_ref_pool", lanes.Interval(1.0, 2.0))
        lanes.record_interval("update_actor", "actor_rollout_ref_pool", lanes.Interval(3.0, 4.0))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"cannot write the timeline to {path}" in warnings[0]
    assert "training goes on" in warnings[0]


def test_a_relative_trace_reaches_the_workers_as_the_launching_folder_s_path(tmp_path, monkeypatch):
    from verl_split.core import settings

    monkeypatch.chdir(tmp_path)
    forwarded = settings.forwarded_env_vars({"VERL_SPLIT": "1", "VERL_SPLIT_TRACE": "out/timeline.json"})
    assert forwarded["VERL_SPLIT_TRACE"] == str(tmp_path / "out" / "timeline.json")
