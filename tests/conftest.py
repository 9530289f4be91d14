"""Shared fixtures and options: the tiny CPU assets (made once per run), the main_ppo runner
(``tests/support/ppo_run.py``), the runs several e2e files share, and ``--extended``.

The helpers the tests import live in ``tests/support/``; this folder (``tests/``) is on ``sys.path`` once pytest
loads this file, so a test at any depth imports them as ``support.<module>``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from support import compose_cache
from support.ppo_run import (
    EXAMPLE_STEPS,
    EXAMPLE_TIMEOUT_S,
    LATE_JOIN,
    PPORun,
    checkpointed_overrides,
    halves_overrides,
    plugin_env,
    run_main_ppo,
)
from support.xdist_groups import group_of, ray_folder
from support.yaml_cache import install as cache_yaml_parses

from verl_split.dryrun.assets import TinyAssets, make_tiny_assets


def _has_vllm() -> bool:
    """vLLM is installed (its distribution, not a module: with tests/ on sys.path a folder named ``vllm`` there
    would pass for one, which is why the tier's folder is ``on_vllm``)."""
    from importlib import metadata

    try:
        metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return False
    return True


#: The vLLM tier (tests/on_vllm/) runs in the environment with the real vLLM only (make test-vllm); the main
#: environment has none, and its runs leave the folder out.
collect_ignore = [] if _has_vllm() else ["on_vllm"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--extended",
        action="store_true",
        help="also run the tests marked `extended` (make test-extended, scripts/test-all-families.sh)",
    )


def pytest_configure(config: pytest.Config) -> None:
    cache_yaml_parses()  # verl's hydra files, parsed once per process (support/yaml_cache.py)
    # ... and each composed config kept on disk by what decides it (support/compose_cache.py)
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    compose_cache.install(cache.mkdir("verl-split-compose") if cache is not None else None)
    # Under xdist each worker's Ray (and every process it starts) gets a folder of its own: support/xdist_groups.py.
    folder = ray_folder(os.environ.get("PYTEST_XDIST_WORKER"))
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        os.environ["RAY_TMPDIR"] = folder


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # what one xdist worker runs together (-n 2 --dist loadgroup: support/xdist_groups.py)
        group = group_of(item.path, {mark.name for mark in item.iter_markers()})
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
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


@pytest.fixture(scope="session", autouse=True)
def _no_composes_kept_that_name_this_run_s_temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    compose_cache.skip_containing(str(tmp_path_factory.getbasetemp()))  # support/compose_cache.py


@pytest.fixture(scope="session")
def model_folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """``model_folder(name, shape)``: a folder ``name`` holding ``config.json`` with ``shape`` (a model's HF
    config, no weights). It lives at a path made of its content, in pytest's cache when there is one, so a test
    that composes a config naming it composes the same config on every run (support/compose_cache.py)."""
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    root = cache.mkdir("verl-split-models") if cache is not None else tmp_path_factory.mktemp("models")

    def make(name: str, shape: dict) -> Path:
        text = json.dumps(shape, sort_keys=True)
        folder = root / hashlib.sha256(f"{name}\0{text}".encode()).hexdigest()[:16] / name
        if not (folder / "config.json").exists():
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f"config.json.{os.getpid()}"  # whole, then renamed: xdist workers share the cache
            partial.write_text(text)
            os.replace(partial, folder / "config.json")
        return folder

    return make


@pytest.fixture
def main_ppo_runner():
    """The :func:`run_main_ppo` helper, for tests that prefer a fixture to an import."""
    return run_main_ppo


@pytest.fixture(scope="session")
def halves_split_run(tiny_assets, tmp_path_factory) -> tuple[Path, PPORun]:
    """One 2-step GAE dry run with ``VERL_SPLIT=1``, placement ``halves`` on 2 logical GPUs and the test plugin
    logging: test_split_placement_e2e checks its layout (--extended)."""
    out = tmp_path_factory.mktemp("split_halves")
    run = run_main_ppo(
        halves_overrides(tiny_assets, out), out, env=plugin_env(out, VERL_SPLIT="1", VERL_SPLIT_PLACEMENT="halves")
    )
    return out, run


@pytest.fixture(scope="session")
def shared_rollout_run(tiny_assets, tmp_path_factory) -> tuple[Path, PPORun]:
    """Split placement ``halves`` on 2 logical GPUs with rollout on both pools (verl 0.9's v1 trainer) and the
    deferral, checkpoints after steps 2 and 4 in ``OUT/checkpoints``. The critic pool joins steps 2 and 4 late
    (``LATE_JOIN``); steps 1 and 3 it generates from the start (step 3 follows the checkpoint, whose save joined
    step 2's critic update): test_shared_rollout_e2e checks what shared rollout did, test_checkpoint_e2e
    resumes from step 2's checkpoint and compares with it."""
    out = tmp_path_factory.mktemp("shared_rollout")
    env = plugin_env(
        out,
        VERL_SPLIT="1",
        VERL_SPLIT_PLACEMENT="halves",
        RAY_DEDUP_LOGS="0",  # every replica's own log lines, not Ray's "[repeated 3x across cluster]"
        **LATE_JOIN,
    )
    overrides = checkpointed_overrides(tiny_assets, out, "v1", out / "checkpoints", resume=False)
    return out, run_main_ppo(overrides, out, env=env)


@pytest.fixture(scope="session")
def example_run(tiny_assets, tmp_path_factory):
    """``bash examples/split_placement/run_tiny_cpu.sh`` as a user runs it: ``main_ppo_split.py`` on the dry run's
    job, 2 logical GPUs, no ``VERL_SPLIT`` in the shell. test_examples_e2e checks that it switched itself on;
    test_shared_rollout_e2e compares shared rollout with it (the same job, rollout on the actor pool only).
    (OUT, the finished run, its console output)."""
    from support.paths import EXAMPLE

    from verl_split.dryrun.runner import METRICS_FILE, run_logged

    tmp = tmp_path_factory.mktemp("example")
    out = tmp / "example"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
    env.update(
        PYTHON=sys.executable,
        OUT=str(out),
        STEPS=str(EXAMPLE_STEPS),
        GPUS="2",
        ASSETS=str(tiny_assets.root),
        VERL_SPLIT_CPU="1",
    )
    log_path = tmp / "run_tiny_cpu.log"
    # Its own process group, killed whole on a timeout, so Ray and every worker end with it.
    done = run_logged(
        ["bash", str(EXAMPLE / "run_tiny_cpu.sh")], env, tmp, log_path, out / METRICS_FILE, timeout=EXAMPLE_TIMEOUT_S
    )
    return out, done, log_path.read_text(errors="replace")
