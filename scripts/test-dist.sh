#!/usr/bin/env bash
# The install a user makes, checked from the built wheel (make test-dist, in make test): a fresh virtual
# environment with verl 0.9.1 and the wheel of dist/ (not this checkout), then `verl-split doctor` and a one-step
# split-placement CPU dry run, both started from an empty folder outside the checkout, so that nothing of the
# checkout can be imported by accident.
#   scripts/test-dist.sh [DIR]     # DIR: where the environment and the run go (default: a new temporary folder;
#                                  # a folder given must be empty or absent); removed at the end unless KEEP=1
# The environment is made as the Makefile makes .venv: the CPU build of torch 2.13.0 first with pip (an unpinned
# torch would pull CUDA), then the wheel with its `cpu` extra (what the CPU dry run needs) and verl with uv,
# under constraints/verl-0.9.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${PYTHON:-python3.11}
uv=${UV:-$root/.venv/bin/uv}
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' verl_split/__init__.py)
wheel=$root/dist/verl_split-$version-py3-none-any.whl
[[ -f $wheel ]] || { echo "test-dist: no $wheel: run \`make dist\` first" >&2; exit 2; }
[[ -x $uv ]] || { echo "test-dist: no uv at $uv: run \`make .venv/bin/verl-split\`, or set UV" >&2; exit 2; }

if [[ $# -ge 1 ]]; then
    dir=$1
    # Never into a folder that holds something: the end of this script removes what it made there.
    if [[ -e $dir ]] && [[ -n $(ls -A "$dir") ]]; then
        echo "test-dist: $dir is not empty; give an empty or new folder" >&2
        exit 2
    fi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/vsdist.XXXXXX")
fi
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$dir"; }
trap cleanup EXIT
started=$SECONDS

venv=$dir/venv
"$python" -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0
"$uv" pip install --python "$venv/bin/python" -q "verl-split[cpu] @ file://$wheel" -c constraints/verl-0.9.txt
echo "test-dist: installed $(basename "$wheel") into a fresh environment with verl 0.9.1 ($((SECONDS - started)) s)"

# From an empty folder: the checkout is neither the working folder nor on sys.path.
run=$dir/run
mkdir -p "$run"
cd "$run"
where=$("$venv/bin/python" -c 'import verl_split; print(verl_split.__file__)')
[[ $where == "$venv"/* ]] || { echo "test-dist: verl_split imported from $where, not the installed wheel" >&2; exit 1; }
VERL_SPLIT=1 "$venv/bin/verl-split" doctor >doctor.log 2>&1 || { cat doctor.log >&2; exit 1; }
grep -q "^  active            yes" doctor.log || { cat doctor.log >&2; echo "test-dist: doctor: not active" >&2; exit 1; }
echo "test-dist: VERL_SPLIT=1 verl-split doctor: healthy, active"
# Ray's folder under this run's own folder: never one another run on the machine uses.
mkdir -p "$dir/ray"
if ! RAY_TMPDIR=$dir/ray VERL_SPLIT=1 "$venv/bin/verl-split" demo --steps 1 --out "$run/demo" >demo.log 2>&1; then
    tail -40 demo.log >&2
    echo "test-dist: the one-step split CPU dry run failed (its log above)" >&2
    exit 1
fi
grep -q '"split/overlapped"' "$run/demo/metrics.jsonl" || { echo "test-dist: no split/* metrics" >&2; exit 1; }
echo "test-dist: a one-step split-placement CPU dry run from the installed wheel ($((SECONDS - started)) s in all)"
