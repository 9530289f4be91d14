#!/usr/bin/env bash
# The short check of a verl release that no full test leg runs on (make test-releases, CI): install it over
# its family's environment (scripts/release-env.sh), the preflight (`verl-split doctor --json` with
# VERL_SPLIT=1: every feature available, healthy), then one 2-step split-placement CPU dry run
# (`verl-split demo --steps 2`: stock main_ppo, both pools, the overlaps on). One line per release with its
# time, then a closing "release checks: N passed, M failed".
#   scripts/check-release.sh 0.9.0 0.7.0 0.8.0
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: $0 X.Y.Z [X.Y.Z ...]" >&2; exit 2; }
out=${RELEASE_CHECK_OUT:-.venvs/release-checks}
passed=0 failed=0 summary=()
had_pythonpath=${PYTHONPATH+set} pythonpath=${PYTHONPATH-}
for release in "$@"; do
    echo "=== verl $release"
    start=$SECONDS
    dir=$out/$release
    rm -rf "$dir" && mkdir -p "$dir"
    step=install
    if env_lines=$(scripts/release-env.sh "$release" 2>"$dir/install.log"); then
        eval "$env_lines"
        step=preflight
        if VERL_SPLIT=1 "$RELEASE_BIN/verl-split" doctor --json >"$dir/doctor.json" 2>"$dir/doctor.log" \
            && "$RELEASE_PYTHON" - "$dir/doctor.json" "$release" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["verl_version"] == sys.argv[2], f"doctor saw verl {report['verl_version']}, not {sys.argv[2]}"
missing = {k: f["reason"] for k, f in report["preflight"].items() if not f["available"]}
assert not missing, f"features not available: {missing}"
assert report["healthy"] and report["supported"] and report["active"], report["problems"]
print(f"preflight: {', '.join(f['label'] for f in report['preflight'].values())} available; "
      f"patches applied: {', '.join(report['patches'])}")
PY
        then
            step="2-step dry run"
            # The tiny assets per environment: a tokenizer saved by transformers 5 does not load in 4.
            VERL_SPLIT=1 "$RELEASE_BIN/verl-split" demo --steps 2 --out "$dir/demo" \
                --assets "$out/assets-$(basename "$(dirname "$RELEASE_BIN")")" \
                >"$dir/demo.log" 2>&1 || false
        else
            false
        fi
        result=$?
    else
        result=1
    fi
    if [[ -n $had_pythonpath ]]; then export PYTHONPATH=$pythonpath; else unset PYTHONPATH; fi
    took=$((SECONDS - start))
    if [[ $result -eq 0 ]]; then
        passed=$((passed + 1)) summary+=("verl $release: passed in ${took} s (install, preflight, 2-step split dry run)")
    else
        failed=$((failed + 1)) summary+=("verl $release: FAILED at the $step after ${took} s (logs in $dir)")
        for log in "$dir"/*.log; do echo "--- $log"; tail -25 "$log"; done
    fi
done
printf '%s\n' "${summary[@]}"
echo "release checks: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
