"""Let the CPU dry run's generation be timed as it ran, not in 2 s steps.

Target: ``verl/trainer/ppo/v1/replay_buffer.py`` ``ReplayBuffer.__init__``: the v1 trainer waits for
finished rollouts by polling TransferQueue every ``poll_interval`` seconds, 2.0 by default and not set
from the config (``PPOTrainer._build_replay_buffer`` passes none), so its ``timing_s/gen`` is a
multiple of 2 s whatever generating took -- on a CPU dry run's short generations, most of the phase.
In CPU mode only, the buffer polls every ``CPU_POLL_S``; a GPU run keeps verl's 2 s (the README says
what that costs a step).
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping

#: Seconds between polls in CPU mode: a finished generation waits at most this long to be seen.
CPU_POLL_S = 0.05


def _wrap_replay_buffer_init(wrapped, instance, args, kwargs):
    wrapped(*args, **kwargs)
    instance.poll_interval = min(float(instance.poll_interval), CPU_POLL_S)


def patch(module: ModuleType) -> None:
    _wrapping.wrap(module.ReplayBuffer, "__init__", _wrap_replay_buffer_init)


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.ReplayBuffer, "__init__")
