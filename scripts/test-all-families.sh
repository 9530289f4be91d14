#!/usr/bin/env bash
# Run the whole suite (the `extended` tests included) on every verl family that has constraints/verl-FAMILY.txt, one after the
# other (the suite is CPU-heavy), each in .venvs/verl-FAMILY; print a time per family at the end.
#   scripts/test-all-families.sh              # every family
#   scripts/test-all-families.sh 0.7 0.8 -x   # some families; arguments after them go to pytest
set -uo pipefail
cd "$(dirname "$0")/.."
families=()
while [[ $# -gt 0 && $1 =~ ^[0-9]+\.[0-9]+$ ]]; do families+=("$1"); shift; done
[[ ${#families[@]} -gt 0 ]] || mapfile -t families < <(scripts/family-env.sh --list)
summary=() status=0
for family in "${families[@]}"; do
    echo "=== verl $family"
    start=$SECONDS
    if scripts/family-env.sh "$family" && ".venvs/verl-$family/bin/python" -m pytest --extended "$@"; then
        result=passed
    else
        result=FAILED status=1
    fi
    summary+=("verl $family: $result in $((SECONDS - start)) s")
done
printf '%s\n' "${summary[@]}"
exit $status
