#!/usr/bin/env bash
# Run verl release X.Y.Z in its family's environment without a second copy of its dependencies: the
# family's environment (scripts/family-env.sh) holds its pinned release (constraints/verl-FAMILY.txt);
# any other release of a family whose verl requirements the environment meets goes into
# .venvs/release-X.Y.Z with `pip install --no-deps --target`, put first on PYTHONPATH (its dist-info
# too, so importlib.metadata, and verl-split's version check, see X.Y.Z). The family's environment is
# left as it is. Releases of another family than their own environment's (0.8.0 runs in 0.7's: verl
# 0.7.0, 0.7.1 and 0.8.0 require the same packages; 0.9.0 and 0.9.1 too) are listed in HOST_FAMILY.
#   eval "$(scripts/release-env.sh 0.9.0)"     # sets RELEASE_PYTHON, RELEASE_BIN and PYTHONPATH
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 1 ]] || { echo "usage: $0 X.Y.Z" >&2; exit 2; }
release=$1
family=${release%.*}
# The environment each release runs in: its own family's, or one whose dependencies are the same.
declare -A HOST_FAMILY=([0.8]=0.7)
host=${HOST_FAMILY[$family]:-$family}
constraints=constraints/verl-$host.txt
[[ -f $constraints ]] || { echo "no $constraints: verl $release has no environment here" >&2; exit 2; }
pinned=$(sed -n 's/^verl==//p' "$constraints")
if [[ $host == 0.9 ]]; then venv=.venv; else venv=.venvs/verl-$host; fi
if [[ $venv == .venv ]]; then
    make -s .venv/bin/verl-split >&2
else
    scripts/family-env.sh "$host" >&2
fi
overlay=
if [[ $release != "$pinned" ]]; then
    overlay=.venvs/release-$release
    if [[ ! -f $overlay/.built ]]; then
        rm -rf "$overlay"
        "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --target "$overlay" "verl==$release" >&2
        touch "$overlay/.built"
    fi
    # The environment must meet the release's own requirements (Requires-Dist without an extra).
    PYTHONPATH=$overlay "$venv/bin/python" - "$release" >&2 <<'PY'
import sys
from importlib import metadata
from packaging.requirements import Requirement
release = sys.argv[1]
dist = metadata.distribution("verl")
assert dist.version == release, f"the overlay holds verl {dist.version}, not {release}"
unmet = []
for line in dist.requires or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        unmet.append(f"{req} (not installed)")
        continue
    if req.specifier and not req.specifier.contains(have, prereleases=True):
        unmet.append(f"{req} (installed: {have})")
if unmet:
    sys.exit(f"verl {release} needs what this environment does not have: {'; '.join(unmet)}. Build an environment "
             "of its own: add constraints/verl-FAMILY.txt for it and run scripts/family-env.sh FAMILY.")
print(f"ok: verl {release} over {sys.prefix}: its requirements are met", file=sys.stderr)
PY
fi
root=$(pwd)
echo "export RELEASE_PYTHON=$root/$venv/bin/python RELEASE_BIN=$root/$venv/bin"
if [[ -n $overlay ]]; then
    echo "export PYTHONPATH=$root/$overlay\${PYTHONPATH:+:\$PYTHONPATH}"
fi
