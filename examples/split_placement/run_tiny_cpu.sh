#!/usr/bin/env bash
# PPO with split placement on CPU, no GPU needed: main_ppo_split.py with a tiny model that
# verl_split.dryrun.assets makes locally (nothing downloaded). Two logical GPUs on one node: with the
# default placement (halves) the actor, rollout and ref get one, the critic the other, and the
# two updates of every step run at the same time. A few minutes on a laptop.
#
#   bash run_tiny_cpu.sh                                   # 3 steps into ./verl_split_tiny
#   OUT=/tmp/tiny STEPS=2 bash run_tiny_cpu.sh             # elsewhere, fewer steps
#   bash run_tiny_cpu.sh trainer.total_training_steps=5    # extra hydra overrides come last
#   ASSETS=~/.cache/verl_split_tiny bash run_tiny_cpu.sh    # keep the tiny assets elsewhere
#
# Per-step metrics (split/* included) land in $OUT/metrics.jsonl.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-$PWD/verl_split_tiny}"
STEPS="${STEPS:-3}"
GPUS="${GPUS:-2}"

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
ASSETS="${ASSETS:-$OUT/assets}"  # made once, reused while their version matches

# The CPU dry run's assets, overrides and environment come from verl-split itself (the same ones
# `verl-split demo` and the tests use), so this script cannot drift from what they check.
# Written to files rather than printed: importing torch and transformers may print to stdout.
"$PYTHON" - "$OUT" "$STEPS" "$GPUS" "$ASSETS" <<'PY'
import os
import sys

from verl_split.dryrun.assets import make_tiny_assets
from verl_split.dryrun.recipe import dry_run_overrides, run_environment

out, steps, gpus, assets_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
assets = make_tiny_assets(assets_dir)
with open(os.path.join(out, "overrides.txt"), "w") as f:
    f.write("\n".join(dry_run_overrides(assets, steps=steps, out_dir=out, n_gpus_per_node=gpus)) + "\n")
# Only what run_environment adds or changes (VERL_SPLIT_CPU=1, the metrics file, thread counts).
added = {k: v for k, v in run_environment(out).items() if os.environ.get(k) != v}
with open(os.path.join(out, "run.env"), "w") as f:
    f.write("".join(f"{k}={v}\n" for k, v in added.items()))
PY

mapfile -t OVERRIDES < "$OUT/overrides.txt"
while IFS= read -r assignment; do
    export "${assignment?}"
done < "$OUT/run.env"

# verl's file logger appends: start this run's metrics afresh.
rm -f "$OUT/metrics.jsonl"
cd "$OUT"  # hydra writes its outputs/ folder into the working directory
# No VERL_SPLIT here on purpose: main_ppo_split.py switches verl-split on by itself.
exec "$PYTHON" "$HERE/main_ppo_split.py" "${OVERRIDES[@]}" "$@"
