#!/usr/bin/env bash
# The first run on a real GPU, in one call: verl-split's one-GPU demo end to end, everything it saw in one folder.
#
#   bash scripts/gpu_run.sh [OUT]                                  on a machine with one CUDA GPU (OUT: ./gpu_run)
#   REHEARSE=1 PYTHON=.venv/bin/python bash scripts/gpu_run.sh OUT  the same flow on the CPU (the demo's --rehearse)
#
# It runs, from this tree: the versions (versions.txt); where each pool's worker lands with two logical GPUs on the
# one device (python -m verl_split.dryrun.gpu_probe, probe.txt: "same device: True"); then
# `verl-split demo --device cuda --compare` (stock on the GPU, split placement with overlaps off, then on; the
# console with the phase table in demo.txt; each run's metrics.jsonl and main_ppo.log, the timeline and the plots
# packed in runs.tar.gz). summary.txt: when each part ended, the exit codes. Five files: a GPU machine here sends
# back at most 8, two folders deep (the device tool's README). Where verl, Ray and the rest are not
# installed (a GPU machine with torch only and no network), the kit built from ../shared/gpu-kit/ travels beside the
# tree as .gpukit/site.tar.xz (git-ignored; docs/gpu.md) and is unpacked first. Never `ray stop`: every Ray process
# of this script lives under its own RAY_TMPDIR and only those are ended.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-${OUT:-gpu_run}}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-2}
DEMO_S=${DEMO_S:-420}  # the demo's three runs together; the GPU machine gives a command 10 minutes
WORK=${WORK:-/tmp/verl_split_gpu_run}  # the demo's own folder, packed into OUT/runs.tar.gz at the end
export RAY_TMPDIR=${RAY_TMPDIR:-/tmp/vsg}  # short: Ray's socket paths under it
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/summary.txt"; }
end_our_ray() { pkill -9 -f "$RAY_TMPDIR/" 2>/dev/null; true; }
: > "$OUT/summary.txt"
rm -rf "$WORK" && mkdir -p "$WORK"

if [ -z "${REHEARSE:-}" ] && ! "$PYTHON" -c "import verl, ray" 2>/dev/null; then
  [ -f "$REPO/.gpukit/site.tar.xz" ] || { stamp "no verl/Ray here and no .gpukit/site.tar.xz: see docs/gpu.md"; exit 3; }
  mkdir -p /tmp/verl_split_site && tar -xJf "$REPO/.gpukit/site.tar.xz" -C /tmp/verl_split_site || exit 3
  export PYTHONPATH=/tmp/verl_split_site:$REPO${PYTHONPATH:+:$PYTHONPATH}
  stamp "kit unpacked"
fi

{
  "$PYTHON" - <<'PY'
import importlib.metadata as md, platform, subprocess, sys
print("python", sys.version.split()[0], "on", platform.platform())
for name in ("torch", "transformers", "tokenizers", "accelerate", "numpy", "pyarrow", "ray", "verl", "tensordict",
             "hydra-core", "TransferQueue", "wrapt", "flash-attn", "vllm"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} -")
import torch
print("torch CUDA", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("GPU 0:", torch.cuda.get_device_name(0))
import verl_split
print("verl-split", verl_split.__version__, "from", verl_split.__file__)
PY
  git -C "$REPO" log -1 --format='tree at commit %H (%cd)' 2>/dev/null || echo "tree: ${TREE_COMMIT:-no git here}"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv
} > "$OUT/versions.txt" 2>&1
stamp "versions: $(grep -E '^(torch|verl|ray) ' "$OUT/versions.txt" | tr '\n' ' ')"

timeout -k 10 240 "$PYTHON" -m verl_split.dryrun.gpu_probe > "$OUT/probe.txt" 2>&1
probe=$?
end_our_ray
stamp "probe rc=$probe: $(tail -1 "$OUT/probe.txt")"

rehearse=()
[ -n "${REHEARSE:-}" ] && rehearse=(--rehearse)
# A small object store: Ray's default (30% of the host's memory) may not fit a small /dev/shm, and the job is tiny.
timeout -s INT -k 30 "$DEMO_S" "$PYTHON" -m verl_split demo --device cuda "${rehearse[@]}" --compare --steps "$STEPS" \
  --out "$WORK/demo" --assets "$WORK/assets" "+ray_kwargs.ray_init.object_store_memory=2000000000" \
  > "$OUT/demo.txt" 2>&1
demo=$?
end_our_ray
stamp "demo rc=$demo"
# What comes back from a GPU machine is limited (16 MiB a file): keep the end of a long log.
find "$WORK/demo" -name main_ppo.log -size +4M -exec sh -c 'tail -c 4000000 "$1" > "$1.end" && mv "$1.end" "$1"' _ {} \;
tar -C "$WORK" -czf "$OUT/runs.tar.gz" demo

{
  echo "probe rc=$probe demo rc=$demo ($(($(date +%s) - T0)) s in all)"
  grep -E "same device" "$OUT/probe.txt"
  grep -E "finished in|exited with status|^verl-split demo:" "$OUT/demo.txt"
} >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
[ "$probe" -eq 0 ] && [ "$demo" -eq 0 ]
