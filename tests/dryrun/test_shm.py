"""What a run left in /dev/shm (verl_split/dryrun/shm.py), on a folder of the test's own: the segments that
appeared during the run, have a run's name, and no live process maps. No verl run: tests/on_vllm/ checks /dev/shm
after real vLLM runs; tests/dryrun/test_runner.py, that the runner removes them."""

from __future__ import annotations

import pytest

from verl_split.dryrun import shm

pytestmark = pytest.mark.unit


def test_only_new_unmapped_segments_with_a_run_s_name_are_the_run_s(tmp_path):
    (tmp_path / "psm_before").write_bytes(b"x")
    before = shm.snapshot(tmp_path)
    for name in ("psm_left", "verl_weights_0", "sem.mp-abc", "psm_in_use", "someone_elses"):
        (tmp_path / name).write_bytes(b"x")
    in_use = {str(tmp_path / "psm_in_use")}
    left = shm.left_by_run(before, tmp_path, in_use=in_use)
    assert sorted(p.name for p in left) == ["psm_left", "sem.mp-abc", "verl_weights_0"]


def test_remove_left_removes_them_and_keeps_the_rest(tmp_path):
    before = shm.snapshot(tmp_path)
    (tmp_path / "psm_left").write_bytes(b"x")
    (tmp_path / "unrelated").write_bytes(b"x")
    assert shm.remove_left(before, tmp_path) == ["psm_left"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unrelated"]


def test_a_mapped_segment_is_seen_as_in_use(tmp_path):
    import mmap

    path = tmp_path / "psm_mapped"
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0):
        assert str(path) in shm.mapped_paths()
        assert shm.left_by_run(frozenset(), tmp_path) == []
    assert [p.name for p in shm.left_by_run(frozenset(), tmp_path)] == ["psm_mapped"]


def test_no_such_folder_is_an_empty_snapshot(tmp_path):
    assert shm.snapshot(tmp_path / "absent") == frozenset()
