"""Run the stock ``python -m verl.trainer.main_ppo`` on CPU and collect what it did, for the end-to-end tests.

``run_main_ppo`` starts it in a subprocess (CPU mode on, the caller's ``VERL_SPLIT*`` untouched) through the
demo's runner (``verl_split/dryrun/runner.py``: output to ``main_ppo.log``, the whole process group killed on a
timeout), samples the memory of its whole process tree while it runs, and reads the per-step metrics verl's
``file`` logger wrote. ``plugin_env`` adds the worker-side test plugins of ``tests/support/plugins/``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.proc_memory import TreeMemorySampler

from verl_split.dryrun.assets import TinyAssets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, main_ppo_command, read_metrics, run_logged


@dataclass
class PPORun:
    """What one main_ppo subprocess did."""

    returncode: int
    wall_s: float
    peak_rss_bytes: int  # largest sum of RSS over the process tree (counts shared pages once per process)
    peak_pss_bytes: int  # largest sum of PSS over the process tree (shared pages split between sharers)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # one dict per step, verl's own keys
    log: str = ""

    def series(self, key: str) -> list[float]:
        """The metric's value at every step that logged it."""
        return [float(step[key]) for step in self.metrics if key in step]

    def assert_ok(self) -> None:
        assert self.returncode == 0, f"main_ppo exited with {self.returncode}:\n{self.log[-6000:]}"

    def assert_finite(self, key: str) -> None:
        values = self.series(key)
        assert values, f"no step logged {key}; keys: {sorted(self.metrics[0]) if self.metrics else []}"
        assert all(math.isfinite(v) for v in values), f"{key} not finite: {values}"


def run_main_ppo(
    overrides: Sequence[str],
    out_dir: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> PPORun:
    """Run ``python -m verl.trainer.main_ppo`` with ``overrides`` on CPU and collect what it did."""
    samplers: list[TreeMemorySampler] = []

    def sample_memory(pid: int) -> None:
        samplers.append(TreeMemorySampler(pid))
        samplers[-1].start()

    metrics_path = out_dir / METRICS_FILE
    try:
        finished = run_logged(
            main_ppo_command(list(overrides)),
            run_environment(out_dir, env),
            out_dir,
            out_dir / LOG_FILE,
            metrics_path,
            on_start=sample_memory,
            timeout=timeout,
        )
    finally:
        for sampler in samplers:
            sampler.stop()
    return PPORun(
        returncode=finished.returncode,
        wall_s=finished.wall_s,
        peak_rss_bytes=samplers[0].peak_rss,
        peak_pss_bytes=samplers[0].peak_pss,
        metrics=read_metrics(metrics_path) if metrics_path.exists() else [],
        log=finished.log_path.read_text(errors="replace"),
    )


#: The worker-side test plugin (tests/support/plugins/slow_updates.py), loaded through verl's VERL_USE_EXTERNAL_MODULES.
PLUGINS = str(Path(__file__).resolve().parent / "plugins")


def plugin_env(out: Path, **env: str) -> dict[str, str]:
    """This environment without the caller's VERL_SPLIT* / SLOW_* (the plugin's knobs), plus ``env`` and the
    test plugin, which logs where and when the workers ran each update and preparation call to ``out/updates.jsonl``."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VERL_SPLIT", "SLOW_"))},
        **env,
        "PYTHONPATH": os.pathsep.join(filter(None, [PLUGINS, os.environ.get("PYTHONPATH")])),
        "VERL_USE_EXTERNAL_MODULES": "slow_updates",
        "SLOW_UPDATES_LOG": str(out / "updates.jsonl"),
    }


#: Steps of the split-halves run (tests/conftest.py: ``halves_split_run``).
HALVES_STEPS = 2


def halves_overrides(tiny_assets: TinyAssets, out: Path) -> list[str]:
    return dry_run_overrides(tiny_assets, HALVES_STEPS, "gae", None, out, n_gpus_per_node=2)


#: Steps of the example's run, and how long it may take (tests/conftest.py: ``example_run``).
EXAMPLE_STEPS = 2
EXAMPLE_TIMEOUT_S = 900

#: The checkpointed job: ``CHECKPOINTED_STEPS`` steps, a checkpoint after step ``SAVED_STEP`` (and the last).
CHECKPOINTED_STEPS = 4
SAVED_STEP = 2

#: Rollout on both pools with late joins, every decision forced so that nothing depends on the machine's load
#: (the test plugin, tests/support/plugins/slow_updates.py): the critic's update of steps 1 and 3 ends only once
#: the next step's generation has begun, so it runs on past the weight sync (the deferral) and holds the critic
#: pool back (late_join.py); the critic pool then joins without asking the rate model
#: (``VERL_SPLIT_LATE_JOIN=always``; the rule itself: tests/runtime/shared_rollout/test_shared_rollout_late_join.py);
#: and the actor pool's server waits, after its first request of a step, until the critic pool's has begun one,
#: so the critic pool certainly finds requests still queued. Steps 2 and 4 are joined late; steps 1 and 3 the
#: critic pool generates from the start (step 3 follows the checkpoint, whose save joined step 2's update).
#: Each request takes ``SLOW_GENERATE_SLEEP`` longer and logs itself (8 requests a step).
GENERATE_SLEEP_S = 0.25
LATE_JOIN = {
    "VERL_SPLIT_SHARED_ROLLOUT": "1",
    "VERL_SPLIT_LATE_JOIN": "always",
    "SLOW_GENERATE_SLEEP": str(GENERATE_SLEEP_S),
    "SLOW_CRITIC_HOLD_STEPS": "1,3",
    "SLOW_GENERATE_AWAIT": "1",
}


def checkpointed_overrides(
    tiny_assets: TinyAssets,
    out: Path,
    trainer: str | None,
    checkpoints: Path,
    resume: bool,
    steps: int = CHECKPOINTED_STEPS,
    saved: int = SAVED_STEP,
) -> list[str]:
    """The dry run's GAE job on 2 logical GPUs for ``steps`` steps, saving every ``saved`` steps into
    ``checkpoints``; ``resume``: from the latest checkpoint there (verl's ``resume_mode=auto``)."""
    kept = [
        o
        for o in dry_run_overrides(tiny_assets, steps, "gae", trainer, out, n_gpus_per_node=2)
        if not o.startswith(("trainer.save_freq=", "trainer.default_local_dir=", "trainer.resume_mode="))
    ]
    return [
        *kept,
        f"trainer.save_freq={saved}",
        f"trainer.default_local_dir={checkpoints}",
        f"trainer.resume_mode={'auto' if resume else 'disable'}",
    ]


def last_checkpoint(checkpoints: Path) -> int:
    """The step verl's own marker names as the latest checkpoint, after checking that its folder holds every role's
    model shards and that they load (``torch.load``): the checkpoint a resume would start from is intact."""
    import torch

    step = int((checkpoints / "latest_checkpointed_iteration.txt").read_text().strip())
    for role in ("actor", "critic"):
        shards = sorted((checkpoints / f"global_step_{step}" / role).glob("model_world_size_*_rank_*.pt"))
        assert shards, f"no {role} model shard in {checkpoints / f'global_step_{step}'}"
        for shard in shards:
            assert torch.load(shard, weights_only=False), shard
    return step
