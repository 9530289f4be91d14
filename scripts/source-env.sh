#!/usr/bin/env bash
# Make .venvs/verl-NAME from a verl source tree (a git checkout of verl's main, a branch, a fork): the CPU
# torch first, pinned, then verl from DIR and verl-split (editable, with the test extra), under
# constraints/verl-source.txt, which pins torch so pip cannot pull another (CUDA) one. Nothing of verl's
# optional extras (vllm, sglang, its git-only TransferQueue): verl-split's [cpu] extra brings what the
# CPU dry run needs, as in the family environments (scripts/family-env.sh).
#   git --git-dir=/path/to/verl.git worktree add /tmp/verl-main main
#   scripts/source-env.sh /tmp/verl-main main      # -> .venvs/verl-main
#   VERL_SPLIT=1 .venvs/verl-main/bin/verl-split doctor
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
[[ $# -eq 2 ]] || { echo "usage: $0 VERL_SOURCE_DIR NAME" >&2; exit 2; }
source_dir=$(cd "$1" && pwd)
name=$2
[[ -f $source_dir/verl/__init__.py ]] || { echo "$source_dir has no verl/__init__.py: not a verl source tree" >&2; exit 2; }
constraints=constraints/verl-source.txt
venv=.venvs/verl-$name
[[ -x $venv/bin/python ]] || "$PYTHON" -m venv "$venv"
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
"${pip[@]}" -U pip
# The CPU build of torch first, pinned: an unpinned torch would pull gigabytes of CUDA.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -c "$constraints" "$source_dir" -e '.[test]'
"$venv/bin/python" - <<'PY'
from importlib import metadata
verl, torch = metadata.version("verl"), metadata.version("torch")
assert torch.startswith("2.13.0"), f"torch {torch}: another torch was resolved"
print(f"ok: verl {verl} (from source), torch {torch}, transformers {metadata.version('transformers')}, ray {metadata.version('ray')}")
PY
