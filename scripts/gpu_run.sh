#!/usr/bin/env bash
# The first run on a real GPU, in one call of at most 10 minutes: verl-split's one-GPU demo, each part kept as it ends.
#
#   bash scripts/gpu_run.sh [OUT]                                  on a machine with one CUDA GPU (OUT: ./gpu_run)
#   REHEARSE=1 PYTHON=.venv/bin/python bash scripts/gpu_run.sh OUT  the same flow on the CPU (the demo's --rehearse)
#
# What it writes to OUT, each file as its part ends (six files, none deeper than OUT):
#   versions.txt          Python, torch and CUDA, the GPU, verl, Ray, transformers, the tree's commit
#   probe.txt             where each pool's worker lands (python -m verl_split.dryrun.gpu_probe: "same device: True")
#   run-overlap.tar.gz    split placement, overlaps on: the console, metrics.jsonl, main_ppo.log (its end), the
#   run-sequential.tar.gz   timeline and plots; then split with overlaps off; then stock verl on one logical GPU
#   run-stock.tar.gz        (`verl-split demo --device cuda --compare --only NAME`, in that order: the run that
#                           matters most first, and one run's failure does not stop the next)
#   summary.txt           the guards set, when each part ended and its exit code, the last phase table; written
#                         whatever happened (an exit trap), even when a part was cut or the call interrupted
#
# Time: every cap is taken from what is left of GPU_RUN_BUDGET_S (560 s) counted from the script's own start, so
# that a slow start (GPU_RUN_DELAY_S injects one, to rehearse it) costs the last runs, never the packed ones; a
# run with less than GPU_RUN_MIN_RUN_S (60 s) left is skipped with a line saying so.
# Where verl and Ray are not installed (a GPU machine with torch only and no network) the offline kit travels
# beside the tree as .gpukit/site.tar.xz (`make gpukit`, docs/gpu.md) and is unpacked first; without either,
# the script stops in its first second. Safe beside other work: its files live under one fresh `mktemp -d`
# folder (Ray's too), and it ends only the processes it started, by pid (never `ray stop`).
set -u
SECONDS=0  # the budget's clock: the script's own start
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-2}
BUDGET_S=${GPU_RUN_BUDGET_S:-560}  # the device call's 600 s, less the start of the interpreter and the copy back
RESERVE_S=${GPU_RUN_RESERVE_S:-20}  # kept back for the last run's packing and the summary
KILL_S=${GPU_RUN_KILL_S:-15}        # a part cut at its cap gets SIGINT, then this long before SIGKILL
MIN_RUN_S=${GPU_RUN_MIN_RUN_S:-60}  # a demo run needs at least this (CUDA torch imported in a dozen processes)
PROBE_S=${GPU_RUN_PROBE_S:-150}
DELAY_S=${GPU_RUN_DELAY_S:-0}
RUNS=${GPU_RUN_RUNS:-overlap sequential stock}
KIT=${GPUKIT:-$REPO/.gpukit/site.tar.xz}

have_verl_and_ray() {
  "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("verl") and u.find_spec("ray")))' 2>/dev/null
}
use_kit=""
if [ -z "${REHEARSE:-}" ] || [ -n "${GPUKIT:-}" ]; then
  if ! have_verl_and_ray; then
    if [ ! -f "$KIT" ]; then
      echo "gpu_run.sh: $PYTHON has no verl or Ray, and there is no offline kit at $KIT: build it with" \
        "'make gpukit' on a machine with PyPI and send .gpukit/ with the tree (docs/gpu.md)" >&2
      exit 3
    fi
    use_kit=1
  fi
fi

OUT=${1:-${OUT:-gpu_run}}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vsg.XXXXXX")  # short: Ray's socket paths under it stay within 107 bytes
export RAY_TMPDIR=$WORK/ray
mkdir -p "$RAY_TMPDIR"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
: > "$OUT/summary.txt"
stamp() { echo "[${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $((BUDGET_S - SECONDS)); }

# Every process this script started that is still there: a run cut at its cap can leave Ray's daemons and workers,
# and all of them name the run's Ray folder (under WORK) on their command line.
end_ours() {
  local pids
  pids=$(pgrep -f -- "$WORK/" 2>/dev/null | grep -vx "$$") || return 0
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  return 0
}
finish() {
  local code=$?
  trap - EXIT INT TERM
  end_ours
  {
    echo "--- ${SECONDS} s in all (budget ${BUDGET_S} s); exit status $code"
    grep -h "same device" "$OUT/probe.txt" 2>/dev/null
    [ -n "${last_console:-}" ] && sed -n '/^verl-split demo: per-step metrics/,$p' "$last_console"
  } | tee -a "$OUT/summary.txt"
  rm -rf "$WORK"
  exit "$code"
}
trap finish EXIT
trap 'stamp "interrupted"; exit 130' INT TERM

# The guards for a machine Ray and NCCL have never run on, each with the reason in the summary.
export RAY_memory_monitor_refresh_ms=0
stamp "guard: RAY_memory_monitor_refresh_ms=0 (Ray's memory monitor off: a VM whose memory grows on demand reads as" \
  "nearly full, and the monitor kills the newest worker above 95 %)"
OBJECT_STORE_BYTES=1000000000
stamp "guard: Ray object store $OBJECT_STORE_BYTES bytes (the default, 30 % of the memory, may not fit a small" \
  "/dev/shm; the job moves little)"
NODE_ADDRESS=127.0.0.1
stamp "guard: Ray node address $NODE_ADDRESS (one node; no routable interface is needed to find one)"
export NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo
stamp "guard: NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo (the rendezvous of each pool's one-rank group stays on" \
  "the loopback interface)"
export NCCL_DEBUG=WARN
stamp "guard: NCCL_DEBUG=WARN (NCCL's warnings reach each run's main_ppo.log)"
stamp "guard: all caps inside ${BUDGET_S} s from the start; runs in order: $RUNS; $STEPS steps each"

if [ -n "$use_kit" ]; then
  mkdir -p "$WORK/site" && tar -xJf "$KIT" -C "$WORK/site" || { stamp "the kit $KIT did not unpack"; exit 3; }
  export PYTHONPATH=$WORK/site:$REPO${PYTHONPATH:+:$PYTHONPATH}
  stamp "kit unpacked ($KIT)"
fi

timeout -k 5 60 "$PYTHON" - > "$OUT/versions.txt" 2>&1 <<'PY'
import importlib.metadata as md, platform, sys
print("python", sys.version.split()[0], "on", platform.platform())
for name in ("torch", "transformers", "tokenizers", "accelerate", "numpy", "pyarrow", "fsspec", "pandas",
             "packaging", "safetensors", "peft", "ray", "verl", "tensordict", "torchdata", "datasets", "hydra-core",
             "TransferQueue", "wrapt", "flash-attn", "vllm"):
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
{
  git -C "$REPO" log -1 --format='tree at commit %H (%cd)' 2>/dev/null || echo "tree: ${TREE_COMMIT:-no git here}"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv
  df -h /dev/shm 2>/dev/null | tail -1 | awk '{print "/dev/shm: " $2 " (" $4 " free)"}'
  free -g 2>/dev/null | awk '/^Mem/ {print "memory: " $2 " GiB, " $7 " available"}'
} >> "$OUT/versions.txt" 2>&1
stamp "versions: $(grep -E '^(python|torch|verl|ray|transformers) ' "$OUT/versions.txt" | tr '\n' ' ')"

cap=$(($(left) - RESERVE_S - KILL_S - MIN_RUN_S))
[ "$cap" -gt "$PROBE_S" ] && cap=$PROBE_S
if [ "$cap" -ge 10 ]; then
  timeout -k "$KILL_S" "$cap" "$PYTHON" -m verl_split.dryrun.gpu_probe > "$OUT/probe.txt" 2>&1
  probe=$?
  end_ours
  stamp "probe rc=$probe (cap ${cap} s): $(tail -1 "$OUT/probe.txt")"
else
  stamp "probe skipped: ${cap} s left for it"
fi

if [ "$DELAY_S" -gt 0 ]; then
  sleep "$DELAY_S"
  stamp "simulated slow start: ${DELAY_S} s (GPU_RUN_DELAY_S)"
fi

rehearse=()
[ -n "${REHEARSE:-}" ] && rehearse=(--rehearse)
DEMO=$WORK/demo  # --compare's layout: overlaps on in DEMO, the others in DEMO/sequential and DEMO/stock
last_console=""
failed=0
for run in $RUNS; do
  cap=$(($(left) - RESERVE_S - KILL_S))
  if [ "$cap" -lt "$MIN_RUN_S" ]; then
    stamp "run $run skipped: ${cap} s left for it, under GPU_RUN_MIN_RUN_S=${MIN_RUN_S}"
    failed=1
    continue
  fi
  console=$WORK/console-$run.txt
  timeout -s INT -k "$KILL_S" "$cap" "$PYTHON" -m verl_split demo --device cuda "${rehearse[@]}" --compare \
    --only "$run" --steps "$STEPS" --out "$DEMO" --assets "$WORK/assets" \
    "+ray_kwargs.ray_init.object_store_memory=$OBJECT_STORE_BYTES" \
    "+ray_kwargs.ray_init._node_ip_address=$NODE_ADDRESS" > "$console" 2>&1
  rc=$?
  end_ours
  case $rc in
    0) last_console=$console ;;
    124 | 137) failed=1 ;;
    *) failed=1 ;;
  esac
  folder=$DEMO
  [ "$run" = overlap ] || folder=$DEMO/$run
  mkdir -p "$folder"
  # What comes back from a GPU machine is limited (16 MiB a file): keep the end of a long log.
  find "$folder" -maxdepth 1 -name main_ppo.log -size +4M \
    -exec sh -c 'tail -c 4000000 "$1" > "$1.end" && mv "$1.end" "$1"' _ {} \;
  tar -czf "$OUT/run-$run.tar.gz.part" -C "$WORK" "console-$run.txt" -C "$folder" --exclude=./sequential \
    --exclude=./stock . && mv "$OUT/run-$run.tar.gz.part" "$OUT/run-$run.tar.gz"
  took=$(grep -hoE "finished in [0-9]+s" "$console" | tail -1)
  case $rc in
    0) stamp "run $run rc=0 (cap ${cap} s): ${took:-finished}; packed in run-$run.tar.gz" ;;
    124 | 137) stamp "run $run cut at its cap of ${cap} s (rc=$rc); what it wrote is packed in run-$run.tar.gz" ;;
    *)
      why=$(grep -hE 'exited with status|^verl-split demo: ' "$console" | tail -1)
      stamp "run $run rc=$rc: $why; packed in run-$run.tar.gz"
      ;;
  esac
done
[ "${probe:-1}" -eq 0 ] && [ "$failed" -eq 0 ]
