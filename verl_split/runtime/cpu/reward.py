"""Rule-based reward for the tiny arithmetic task of the CPU dry run.

verl loads this file by path (``reward.custom_reward_function.path``) in its reward
workers, so it imports nothing but the standard library.
"""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"-?\d+")


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **kwargs: Any
) -> float:
    """1.0 for the right sum, 0.1 for any number at all, else 0.0.

    Spaces are dropped before reading the first number. The 0.1 gives a random model
    some signal to learn from.
    """
    match = _NUMBER.search(solution_str.replace(" ", ""))
    if match is None:
        return 0.0
    return 1.0 if match.group(0) == str(ground_truth).strip() else 0.1
