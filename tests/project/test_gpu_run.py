"""``scripts/gpu_run.sh`` and ``scripts/gpu-kit.sh`` as a GPU call runs them, with a stand-in interpreter.

The GPU call has one try of at most ten minutes, so what is checked here is the script's own coordination: the
order of the runs, each run packed as it ends (a failing run leaves the ones before it packed), a run cut at its
cap, a slow start that leaves no time (every run skipped, the summary still written), the guards' summary lines,
and the refusals in the first second (no kit). The interpreter is a small shell script that answers the calls
the script makes (the versions, the probe, one demo run per call); the real demo's path through the CPU is the
rehearsal in docs/gpu.md. Every budget decision is forced by the settings given (a delay longer than the budget,
a run that never ends), never by how fast this machine is.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

REPO = Path(__file__).resolve().parents[2]
GPU_RUN = REPO / "scripts" / "gpu_run.sh"
GPU_KIT = REPO / "scripts" / "gpu-kit.sh"

# Answers `python -c` (the check for verl and Ray: STUB_NO_VERL says they are missing), `python -` (the versions),
# `python -m verl_split.dryrun.gpu_probe`, and `python -m verl_split demo ... --only NAME --out DIR` (writes the
# run's metrics and log where --compare would, notes NAME in STUB_ORDER, then fails, hangs or prints a table).
STUB = r"""#!/usr/bin/env bash
case "$1" in
  -c) [ -z "${STUB_NO_VERL:-}" ]; exit ;;
  -) cat > /dev/null; echo "python stub"; exit 0 ;;
esac
if [ "$2" = verl_split.dryrun.gpu_probe ]; then echo "same device: True"; exit 0; fi
only=""; out=""
while [ $# -gt 0 ]; do
  case "$1" in --only) only=$2; shift ;; --out) out=$2; shift ;; esac; shift
done
folder=$out; [ "$only" = overlap ] || folder=$out/$only
mkdir -p "$folder"; echo '{"step": 1}' > "$folder/metrics.jsonl"; echo "log of $only" > "$folder/main_ppo.log"
echo "$only" >> "$STUB_ORDER"
case " ${STUB_FAIL:-} " in *" $only "*) echo "verl-split demo: $only: verl exited with status 1"; exit 1 ;; esac
case " ${STUB_HANG:-} " in *" $only "*) exec sleep 600 ;; esac
echo "[1/1] $only: finished in 3s"
echo "verl-split demo: per-step metrics in $out/metrics.jsonl"
echo "phase table after $only"
"""


@pytest.fixture
def stub(tmp_path):
    python = tmp_path / "python"
    python.write_text(STUB)
    python.chmod(0o755)
    return python


def gpu_run(stub: Path, out: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_RUN_", "GPUKIT", "REHEARSE"))}
    env.update(PYTHON=str(stub), STUB_ORDER=str(out.parent / "order"), TMPDIR=str(out.parent), **settings)
    return subprocess.run(["bash", str(GPU_RUN), str(out)], capture_output=True, text=True, env=env, timeout=120)


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {name.removeprefix("./") for name in tar.getnames()} - {"."}


def test_the_runs_go_overlaps_on_first_stock_last_each_packed_as_it_ends(stub, tmp_path):
    out = tmp_path / "out"
    done = gpu_run(stub, out, STUB_FAIL="sequential")
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "order").read_text().split() == ["overlap", "sequential", "stock"]
    assert sorted(path.name for path in out.iterdir()) == [
        "probe.txt",
        "run-overlap.tar.gz",
        "run-sequential.tar.gz",
        "run-stock.tar.gz",
        "summary.txt",
        "versions.txt",
    ]
    # Each run's own folder only: the overlaps-on run's folder holds the others', which are left out of its archive.
    assert members(out / "run-overlap.tar.gz") == {"console-overlap.txt", "metrics.jsonl", "main_ppo.log"}
    assert members(out / "run-sequential.tar.gz") == {"console-sequential.txt", "metrics.jsonl", "main_ppo.log"}
    summary = (out / "summary.txt").read_text()
    assert "run overlap rc=0" in summary and "finished in 3s" in summary
    assert "run sequential rc=1: verl-split demo: sequential: verl exited with status 1" in summary
    assert "run stock rc=0" in summary  # a failed run does not stop the next
    assert "phase table after stock" in summary  # the last finished run's table, which compares every run
    assert "same device: True" in summary
    for guard in (
        "RAY_memory_monitor_refresh_ms=0",
        "Ray object store 1000000000 bytes",
        "Ray node address 127.0.0.1",
        "NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo",
        "NCCL_DEBUG=WARN",
    ):
        assert f"guard: {guard}" in summary
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("vsg.")] == []  # its folder removed


def test_a_slow_start_past_the_budget_skips_every_run_and_still_writes_the_summary(stub, tmp_path):
    out = tmp_path / "out"
    small = {"GPU_RUN_BUDGET_S": "4", "GPU_RUN_RESERVE_S": "1", "GPU_RUN_KILL_S": "1", "GPU_RUN_MIN_RUN_S": "1"}
    done = gpu_run(stub, out, GPU_RUN_DELAY_S="4", **small)
    assert done.returncode == 1
    assert not (tmp_path / "order").exists()  # no run started
    summary = (out / "summary.txt").read_text()
    assert "simulated slow start: 4 s (GPU_RUN_DELAY_S)" in summary
    for run in ("overlap", "sequential", "stock"):
        assert f"run {run} skipped:" in summary
    assert (out / "versions.txt").exists() and "(budget 4 s); exit status 1" in summary


def test_a_run_that_never_ends_is_cut_at_its_cap_and_what_it_wrote_is_packed(stub, tmp_path):
    out = tmp_path / "out"
    # A budget of 8 s leaves the first run a cap of about 6 s; the later runs are skipped or cut in their turn.
    small = {"GPU_RUN_BUDGET_S": "8", "GPU_RUN_RESERVE_S": "1", "GPU_RUN_KILL_S": "1", "GPU_RUN_MIN_RUN_S": "1"}
    done = gpu_run(stub, out, STUB_HANG="overlap", **small)
    assert done.returncode == 1
    summary = (out / "summary.txt").read_text()
    assert "run overlap cut at its cap" in summary and "(rc=124)" in summary
    assert members(out / "run-overlap.tar.gz") == {"console-overlap.txt", "metrics.jsonl", "main_ppo.log"}
    assert "exit status 1" in summary


def test_without_verl_ray_or_the_kit_it_stops_at_once_naming_make_gpukit(stub, tmp_path):
    out = tmp_path / "out"
    done = gpu_run(stub, out, STUB_NO_VERL="1", GPUKIT=str(tmp_path / "no-kit" / "site.tar.xz"))
    assert done.returncode == 3
    assert "has no verl or Ray, and there is no offline kit at" in done.stderr and "'make gpukit'" in done.stderr
    assert not out.exists()  # refused before anything is made


def kit_check(kit_dir: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUKIT_DIR": str(kit_dir), **settings}
    return subprocess.run([str(GPU_KIT), "--check"], capture_output=True, text=True, env=env, timeout=60)


def test_the_kit_check_tells_a_missing_kit_from_one_over_the_limit(tmp_path):
    missing = kit_check(tmp_path / "none")
    assert missing.returncode == 3 and "no kit at" in missing.stderr and "make gpukit" in missing.stderr
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "site.tar.xz").write_bytes(b"\0" * 1024)
    fits = kit_check(tmp_path / "kit")
    assert fits.returncode == 0, fits.stderr
    assert "(limit 64 MiB)" in fits.stdout
    over = kit_check(tmp_path / "kit", GPUKIT_LIMIT_MIB="0")
    assert over.returncode == 4 and "over 0 MiB" in over.stderr
