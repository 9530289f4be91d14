"""The CPU rollout's response lengths (``VERL_SPLIT_CPU_LENGTHS``): fixed, or a long tail shaped like a real run's.

``fixed`` (the default): every request may generate up to ``rollout.response_length`` tokens, as verl asks; the
tiny models seldom stop early, so every response has about the same length and a step's generation has no tail.

``long_tail``: each prompt gets its own cap, drawn from the lognormal that ``benchmarks/control_plane_model.py``
fits to a published verl run (PPO on GSM8K: mean 192.77 tokens, 1.3 % at the 512-token cap: median 172 tokens,
sigma 0.49 of the log), scaled so that the run's 512 becomes ``rollout.response_length``. The draw is seeded by the
prompt's tokens alone, so every run, arm and resume of a job generates the same lengths, and a prompt's samples
(``rollout.n``) share a cap. A response may still end earlier at the model's end-of-sequence token, as in stock.
"""

from __future__ import annotations

import math
import random
import zlib

#: The published run's cap and the fit's lognormal, in units of that cap (control_plane_model.PUBLISHED_LENGTHS).
PUBLISHED_CAP_TOKENS = 512
PUBLISHED_MU = 5.148658388316189
PUBLISHED_SIGMA = 0.48947106099324134


def long_tail_cap(prompt_ids: list[int], response_length: int) -> int:
    """This prompt's cap on new tokens: the published lognormal's draw, scaled to ``response_length``, 1 or more."""
    rng = random.Random(zlib.crc32(repr(tuple(prompt_ids)).encode()))
    tokens = rng.lognormvariate(PUBLISHED_MU, PUBLISHED_SIGMA) * response_length / PUBLISHED_CAP_TOKENS
    return max(1, min(response_length, math.ceil(tokens)))
