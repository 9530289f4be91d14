#!/usr/bin/env bash
# The whole suite (as `make test` runs it on the newest family) on one verl release: its family's environment,
# with the release installed over it when it is not the family's pinned one (scripts/release-env.sh), or
# .venvs/verl-NAME for a verl built from a source tree (scripts/source-env.sh DIR NAME).
#   scripts/test-release.sh 0.9.0            # = make test-release VERL=0.9.0
#   scripts/test-release.sh main -x -k dry   # .venvs/verl-main; arguments after the release go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 && -n $1 ]] || { echo "usage: $0 X.Y.Z|NAME [pytest arguments]  (e.g. make test-release VERL=0.9.0)" >&2; exit 2; }
release=$1
shift
if [[ $release =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    eval "$(scripts/release-env.sh "$release")"
    python=$RELEASE_PYTHON
else
    python=.venvs/verl-$release/bin/python
    [[ -x $python ]] || { echo "no .venvs/verl-$release: build it with scripts/source-env.sh VERL_SOURCE_DIR $release" >&2; exit 2; }
fi
"$python" -c 'from verl_split.core import compat; print("=== the suite on verl", compat.installed_version() + ":", compat.untested_note() or "tested")'
exec "$python" -m pytest "$@"
