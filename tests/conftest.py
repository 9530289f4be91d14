"""Shared fixtures: the tiny CPU assets (made once per run) and a main_ppo runner.

``run_main_ppo`` starts the stock ``python -m verl.trainer.main_ppo`` in a subprocess
(CPU mode on, the caller's ``VERL_SPLIT*`` untouched) through the demo's runner
(``verl_split/dryrun/runner.py``: output to ``main_ppo.log``, the whole process group killed on a
timeout), samples the memory of its whole process tree while it runs, and reads the
per-step metrics verl's ``file`` logger wrote.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from proc_memory import TreeMemorySampler

from verl_split.dryrun.assets import TinyAssets, make_tiny_assets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment
from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, main_ppo_command, read_metrics, run_logged


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--extended",
        action="store_true",
        help="also run the tests marked `extended` (make test-extended, scripts/test-all-families.sh)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `extended` runs repeat what the default suite already shows on another family, trainer or fault
    # kind; CI leaves them out to stay within its time budget.
    if config.getoption("--extended"):
        return
    for item in items:
        mark = item.get_closest_marker("extended")
        if mark is not None:
            why = mark.kwargs.get("reason", "its coverage is in the default suite")
            item.add_marker(pytest.mark.skip(reason=f"extended ({why}); run with --extended"))


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Each test reads settings from its own environment and sees every once-only log line: the frozen
    settings and ``log.once``'s memory are process-wide, so they are reset around every test."""
    from verl_split.core import log, settings

    settings.thaw()
    log.forget_once()
    yield
    settings.thaw()
    log.forget_once()


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory: pytest.TempPathFactory) -> TinyAssets:
    """The tiny model, tokenizer, data set and reward function, made once per pytest run."""
    return make_tiny_assets(tmp_path_factory.mktemp("tiny_assets"))


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


@pytest.fixture
def main_ppo_runner():
    """The :func:`run_main_ppo` helper, for tests that prefer a fixture to an import."""
    return run_main_ppo


#: The worker-side test plugin (tests/plugins/slow_updates.py), loaded through verl's VERL_USE_EXTERNAL_MODULES.
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


#: Steps of the split-halves run shared by several e2e files.
HALVES_STEPS = 2


def halves_overrides(tiny_assets: TinyAssets, out: Path) -> list[str]:
    return dry_run_overrides(tiny_assets, HALVES_STEPS, "gae", None, out, n_gpus_per_node=2)


@pytest.fixture(scope="session")
def halves_split_run(tiny_assets, tmp_path_factory) -> tuple[Path, PPORun]:
    """One 2-step GAE dry run with ``VERL_SPLIT=1``, placement ``halves`` on 2 logical GPUs and the test plugin
    logging: test_split_placement_e2e checks its layout, test_shared_rollout_e2e compares shared rollout with it."""
    out = tmp_path_factory.mktemp("split_halves")
    run = run_main_ppo(
        halves_overrides(tiny_assets, out), out, env=plugin_env(out, VERL_SPLIT="1", VERL_SPLIT_PLACEMENT="halves")
    )
    return out, run
