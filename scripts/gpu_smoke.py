#!/usr/bin/env python3
"""GPU smoke run for the day a GPU machine is at hand: the tiny model on 2 GPUs, four ways, one step table.

    python scripts/gpu_smoke.py [--steps 3] [--out gpu_smoke] [--skip shared] [-- extra hydra overrides]

Never run in CI. It needs 2 GPUs (Ampere or newer: flash-attn 2) and verl's GPU stack installed as verl
documents it, with verl-split added (README, "Installing for GPUs").
It runs ``python -m verl.trainer.main_ppo`` on the demo's data and the tiny model's ``gpu`` shape
(``verl_split.dryrun.assets``: head size 64, which vLLM's attention backends and flash-attn take) with
vLLM rollout on a real 2-GPU Ray cluster, from the CPU dry run's overrides with the CPU-only ones
replaced (``gpu_overrides``: vLLM instead of the CPU rollout, flash-attention and bf16 mixed precision
instead of sdpa in fp32, CUDA, Ray's real GPUs). ``tests/project/test_gpu_smoke_config.py`` composes these
overrides with verl's config and runs verl's own config checks on them; ``tests/project/test_gpu_smoke_sources.py``
checks the network and dtypes against vLLM's and flash-attn's rules, read from their released sources. The runs:

1. stock verl: one pool, every role on both GPUs;
2. split placement, overlaps off (``VERL_SPLIT_OVERLAP=off``);
3. split placement with the overlaps (the default);
4. split placement with shared rollout (``VERL_SPLIT_SHARED_ROLLOUT=1``): vLLM on the critic's GPU too,
   the actor's weights pushed to it over NCCL (needs cupy: verl's ``fsdp`` extra brings ``cupy-cuda13x``).

Each run's verl output goes to ``OUT/<run>/main_ppo.log`` and its per-step metrics to
``OUT/<run>/metrics.jsonl``; a run that fails prints the end of its log and the next one starts. At
the end it prints the table of each phase's wall time (``verl_split.dryrun.report.phase_table``), and for
the split runs the update phase per step. What to look at: every run finishes; split runs log
``split/overlapped`` 1 (overlaps on) and 0 (off); shared rollout logs ``split/critic_pool_rollout_share``
above 0 and ``split/shared_rollout_sync_s``; losses of runs 2 and 3 agree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from verl_split.dryrun import one_gpu

if TYPE_CHECKING:
    from verl_split.dryrun.assets import TinyAssets

RUNS = {
    "stock": ("stock verl", {}),
    "split": ("split, overlaps off", {"VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "off"}),
    "overlap": ("split, overlaps on", {"VERL_SPLIT": "1"}),
    "shared": ("split + shared rollout", {"VERL_SPLIT": "1", "VERL_SPLIT_SHARED_ROLLOUT": "1"}),
}
GPUS = 2


#: The CPU dry run's overrides a GPU run leaves out, for verl's GPU defaults: ``flash_attention_2``
#: (verl/workers/config/model.py, HFModelConfig.__post_init__; the critic loads it whatever the config says,
#: verl/utils/model.py, load_valuehead_model),
#: Ray's own count of the node's GPUs and CPUs, the device (set below).
CPU_ONLY = (
    "trainer.device=",
    "+ray_kwargs.ray_init.num_gpus=",
    "ray_kwargs.ray_init.num_cpus=",
    "+actor_rollout_ref.model.override_config.attn_implementation=",
    "+critic.model.override_config.attn_implementation=",
)
#: The CPU overrides whose value changes on GPUs (key prefix -> GPU value).
REPLACED = {
    "actor_rollout_ref.rollout.name=": "vllm",
    "actor_rollout_ref.rollout.dtype=": "bfloat16",
    # verl's default (model/hf_model.yaml): padding removed, which its flash-attention patch handles
    # (verl/models/transformers/monkey_patch.py, apply_monkey_patch); the CPU run keeps padding for sdpa.
    "actor_rollout_ref.model.use_remove_padding=": "true",
    "critic.model.use_remove_padding=": "true",
}
#: FSDP mixed precision on GPUs, verl's default (verl/workers/engine/fsdp/transformer_impl.py,
#: FSDPEngine._build_fsdp_module): bf16 compute under autocast. fp32 (the CPU run's) skips autocast
#: (FSDPEngineWithLMHead.forward_step), and flash-attn takes fp16/bf16 only (csrc/flash_attn/flash_api.cpp,
#: mha_fwd and mha_bwd in 2.8.3; tests/project/test_gpu_smoke_sources.py reads their checks). The one-GPU demo's.
MIXED_PRECISION = one_gpu.MIXED_PRECISION


def gpu_overrides(cpu_overrides: list[str]) -> list[str]:
    """The CPU dry run's overrides for a real 2-GPU node: vLLM, flash-attention in bf16, CUDA, the node's GPUs."""
    out = []
    for override in cpu_overrides:
        if override.startswith(CPU_ONLY):
            continue
        key, _, value = override.partition("=")
        prefix = next((k for k in REPLACED if override.startswith(k)), None)
        if prefix:
            value = REPLACED[prefix]
        elif ".mixed_precision." in key:
            value = MIXED_PRECISION[key.rpartition(".")[2]]
        out.append(f"{key}={value}")
    return [
        *out,
        "trainer.device=cuda",
        # Stock verl colocates vLLM with the actor and the critic on each GPU: leave them room.
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.enforce_eager=true",
        # Shared rollout's push: small buckets for a small model.
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64",
    ]


def smoke_overrides(assets: TinyAssets, steps: int, run_out: Path) -> list[str]:
    """Every run's overrides, before the command line's: PPO (GAE, critic) on verl's v1 trainer, 2 GPUs."""
    from verl_split.dryrun.recipe import dry_run_overrides

    return gpu_overrides(dry_run_overrides(assets, steps, "gae", "v1", run_out, n_gpus_per_node=GPUS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="gpu_smoke")
    parser.add_argument("--skip", action="append", default=[], choices=sorted(RUNS), help="leave a run out")
    parser.add_argument("overrides", nargs="*", help="hydra overrides for every run, applied last")
    args = parser.parse_args()

    from verl_split.dryrun import report
    from verl_split.dryrun.assets import make_tiny_gpu_assets
    from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, main_ppo_command, read_metrics

    if shutil.which("nvidia-smi") is None:
        print("gpu_smoke: no nvidia-smi on this machine: this script needs 2 GPUs (see its docstring)", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    assets = make_tiny_gpu_assets(out / "assets")
    columns = []
    failed = []
    for name, (title, extra_env) in RUNS.items():
        if name in args.skip:
            continue
        run_out = out / name
        shutil.rmtree(run_out, ignore_errors=True)
        run_out.mkdir()
        overrides = smoke_overrides(assets, args.steps, run_out)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_SPLIT")}
        env.update(extra_env, VERL_FILE_LOGGER_PATH=str(run_out / METRICS_FILE), TOKENIZERS_PARALLELISM="false")
        env.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local folder: never wait on a hub
        print(f"gpu_smoke: {title} ({args.steps} steps) -> {run_out / LOG_FILE}", flush=True)
        with open(run_out / LOG_FILE, "w") as log:
            code = subprocess.call(
                main_ppo_command([*overrides, *args.overrides]), env=env, cwd=run_out, stdout=log, stderr=log
            )
        if code != 0:
            failed.append(title)
            tail = (run_out / LOG_FILE).read_text(errors="replace")[-4000:]
            print(f"gpu_smoke: {title} failed with exit code {code}; the end of its log:\n{tail}", file=sys.stderr)
            continue
        columns.append((title, read_metrics(run_out / METRICS_FILE)))
    if columns:
        print()
        print(report.phase_table(columns))
        for title, metrics in columns[1:]:
            rows = report.step_rows(metrics)
            if rows:
                print(f"\nupdate phase per step, {title}:")
                print(report.summary_table(rows))
            shares = [
                m.get("split/critic_pool_rollout_share") for m in metrics if "split/critic_pool_rollout_share" in m
            ]
            if shares:
                print(f"{title}: critic pool's share of the requests per step {shares}")
    if failed:
        print(f"gpu_smoke: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
