"""``verl-split advise`` reads a 500-step console log of tens of MB in under 2 s (issue 24).

The figure on this project's machine is ``benchmarks/advise_speed.py``'s (README); this test keeps the goal, on
a log of the same shape, as a guard against a parser that reads the file more than once or line by line.
"""

from __future__ import annotations

import time

import pytest
from support.verl_console import long_console_log

from verl_split.placement import Cluster
from verl_split.tools.advise import advise

pytestmark = pytest.mark.unit

GOAL_S = 2.0


def test_a_500_step_console_log_of_20_mb_is_advised_under_2_s(tmp_path):
    path = tmp_path / "main_ppo.log"
    assert long_console_log(path, 500, 20.0) > 19 * 2**20
    start = time.perf_counter()
    advice = advise([path], Cluster(1, 8))
    elapsed = time.perf_counter() - start
    assert advice.runs[0].steps == tuple(range(2, 501))
    assert elapsed < GOAL_S, f"{elapsed:.2f} s"
