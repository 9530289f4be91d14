#!/usr/bin/env bash
# Make .venvs/verl-FAMILY: the CPU torch first, then the newest verl of FAMILY and verl-split
# (editable, with the test extra), all under constraints/verl-FAMILY.txt so pip can neither
# upgrade verl out of its family nor pull another (CUDA) torch.
#   scripts/family-env.sh 0.7        # build (or refresh) .venvs/verl-0.7
#   scripts/family-env.sh --list     # the families there are constraints for
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}

if [[ ${1:-} == --list || -z ${1:-} ]]; then
    ls constraints | sed -n 's/^verl-\([0-9][0-9]*\.[0-9][0-9]*\)\.txt$/\1/p' | sort -V  # not verl-source.txt (scripts/source-env.sh)
    [[ -n ${1:-} ]] || { echo "usage: $0 FAMILY (one of the above)" >&2; exit 2; }
    exit 0
fi
family=$1
constraints=constraints/verl-$family.txt
[[ -f $constraints ]] || { echo "no $constraints: families are $(ls constraints | sed -n 's/^verl-\(.*\)\.txt$/\1/p' | xargs)" >&2; exit 2; }
verl_pin=$(grep -E '^verl==' "$constraints")
venv=.venvs/verl-$family
stamp=$venv/.built

if [[ -f $stamp && $stamp -nt $constraints && $stamp -nt pyproject.toml ]]; then
    echo "$venv is up to date ($verl_pin)"; exit 0
fi
[[ -x $venv/bin/python ]] || "$PYTHON" -m venv "$venv"
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
"${pip[@]}" -U pip uv
# The CPU build of torch first, pinned, with pip (it finds the machine's file of it; uv does not): an unpinned
# torch would pull gigabytes of CUDA. The rest with uv under the family's pins (torch==2.13.0 among them).
"${pip[@]}" torch==2.13.0
# A family may name more extras on a line `# extras: a,b` of its constraints file (0.7: megatron-cpu).
extras=$(sed -n 's/^# extras: *//p' "$constraints")
"$venv/bin/uv" pip install --python "$venv/bin/python" -q --compile-bytecode -c "$constraints" "$verl_pin" -e ".[test${extras:+,$extras}]"
"$venv/bin/python" - "$family" <<'PY'
import sys
from importlib import metadata
family = sys.argv[1]
verl, torch = metadata.version("verl"), metadata.version("torch")
assert verl.startswith(family + "."), f"verl {verl} is not in family {family}"
assert torch.startswith("2.13.0"), f"torch {torch}: another torch was resolved"
print(f"ok: verl {verl}, torch {torch}, transformers {metadata.version('transformers')}, ray {metadata.version('ray')}")
PY
touch "$stamp"
