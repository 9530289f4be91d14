"""``verl-split advise`` reads a 500-step console log of tens of MB in one read of the whole file (issue 24).

The time on this project's machine is ``benchmarks/advise_speed.py``'s (README: under 2 s); a test asserts no wall
time (it must pass beside a busy machine). What keeps the speed is checked instead: the file is opened once and
read whole, not line by line or twice.
"""

from __future__ import annotations

import builtins

import pytest
from support.verl_console import long_console_log

from verl_split.placement import Cluster
from verl_split.tools.advise import advise

pytestmark = pytest.mark.unit


def test_a_500_step_console_log_of_20_mb_is_read_once_and_whole(tmp_path, monkeypatch):
    path = tmp_path / "main_ppo.log"
    assert long_console_log(path, 500, 20.0) > 19 * 2**20
    reads: list[int | None] = []
    real_open = builtins.open

    class CountingFile:
        def __init__(self, f):
            self._f = f

        def read(self, *args):
            reads.append(args[0] if args else None)
            return self._f.read(*args)

        def __iter__(self):
            raise AssertionError("the log was read line by line")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._f.__exit__(*exc)

        def __getattr__(self, name):
            return getattr(self._f, name)

    def counting_open(file, *args, **kwargs):
        f = real_open(file, *args, **kwargs)
        return CountingFile(f) if str(file) == str(path) else f

    monkeypatch.setattr(builtins, "open", counting_open)
    advice = advise([path], Cluster(1, 8))
    assert advice.runs[0].steps == tuple(range(2, 501))
    assert reads == [None], reads  # one read of the whole file
