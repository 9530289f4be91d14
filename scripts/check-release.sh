#!/usr/bin/env bash
# The short check of a verl release that no full test leg runs on (make test-releases, CI): install it over
# its family's environment (scripts/release-env.sh), the preflight (`verl-split doctor --json` with
# VERL_SPLIT=1: every feature available, healthy), then one 2-step split-placement CPU dry run
# (`verl-split demo --steps 2`: stock main_ppo, both pools, the overlaps on) and what its metrics say (the
# updates overlapped in both steps). A release named in RELEASE_GRPO runs GRPO instead (no critic: the run
# trains none, overlaps nothing and says why); one named in RELEASE_SHARED runs with shared rollout on
# (VERL_SPLIT_SHARED_ROLLOUT=1: the critic pool's replica started, generating in step 1 beside the actor pool's,
# every step's share logged; RayPPOTrainer's hooks on 0.8.0). One line per release with its time, then a closing
# "releases: N passed, M failed".
#   scripts/check-release.sh 0.9.0 0.7.0 0.8.0
#   RELEASE_GRPO=0.9.0 RELEASE_SHARED=0.8.0 scripts/check-release.sh 0.9.0 0.7.0 0.8.0
#   RELEASE_CHECK_JOBS=1 scripts/check-release.sh 0.9.0 0.7.0    # one release at a time
# The installs run one after the other; the checks of up to RELEASE_CHECK_JOBS releases (default 3) run at
# once: a 2-step dry run mostly waits for Ray to start its processes (about 30 s of CPU in 70 s on 2 cores),
# and each has a Ray cluster of its own (its own temporary folder), about 4 GiB of memory (PSS).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: $0 X.Y.Z [X.Y.Z ...]" >&2; exit 2; }
out=${RELEASE_CHECK_OUT:-.venvs/release-checks}
jobs=${RELEASE_CHECK_JOBS:-3}
started=$SECONDS

check() {  # release dir: the preflight and the dry run, in the environment release-env.sh printed
    local release=$1 dir=$2
    eval "$(cat "$dir/env")"
    echo preflight >"$dir/step"
    VERL_SPLIT=1 "$RELEASE_BIN/verl-split" doctor --json >"$dir/doctor.json" 2>"$dir/doctor.log" || return 1
    "$RELEASE_PYTHON" - "$dir/doctor.json" "$release" >"$dir/preflight.txt" 2>&1 <<'PY' || return 1
import json, sys
report = json.load(open(sys.argv[1]))
assert report["verl_version"] == sys.argv[2], f"doctor saw verl {report['verl_version']}, not {sys.argv[2]}"
missing = {k: f["reason"] for k, f in report["preflight"].items() if not f["available"]}
assert not missing, f"features not available: {missing}"
assert report["healthy"] and report["supported"] and report["active"], report["problems"]
print(f"preflight: {', '.join(f['label'] for f in report['preflight'].values())} available; "
      f"patches applied: {', '.join(report['patches'])}")
PY
    local algo=gae shared=0
    [[ " ${RELEASE_GRPO:-} " == *" $release "* ]] && algo=grpo
    [[ " ${RELEASE_SHARED:-} " == *" $release "* ]] && shared=1
    echo "2-step $algo dry run$([[ $shared == 1 ]] && echo ' with shared rollout')" >"$dir/step"
    # The tiny assets per environment (a tokenizer saved by transformers 5 does not load in 4); a Ray
    # temporary folder per release, so that checks running at once never share one.
    VERL_SPLIT=1 VERL_SPLIT_SHARED_ROLLOUT=$shared "$RELEASE_BIN/verl-split" demo --steps 2 --algo "$algo" --out "$dir/demo" \
        --assets "$out/assets-$(basename "$(dirname "$RELEASE_BIN")")" \
        "ray_kwargs.ray_init._temp_dir=/tmp/ray_vs_$release" >"$dir/demo.log" 2>&1 || return 1
    # What the run did, from verl's own metrics and log: with a critic both pools' updates overlapped in every
    # step; GRPO trained no critic, overlapped nothing, and the run said why.
    echo "$algo run's metrics" >"$dir/step"
    "$RELEASE_PYTHON" - "$dir/demo" "$algo" "$shared" >>"$dir/preflight.txt" 2>&1 <<'PY' || return 1
import sys
from pathlib import Path
from verl_split.dryrun.runner import LOG_FILE, METRICS_FILE, read_metrics
out, algo, shared = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
steps = read_metrics(out / METRICS_FILE)
assert [s["step"] for s in steps] == [1, 2], [s.get("step") for s in steps]
overlapped = [s.get("split/overlapped") for s in steps]
if algo == "grpo":
    assert not any("critic/vf_loss" in s for s in steps), "GRPO trained a critic"
    assert all("actor/kl_loss" in s for s in steps) and overlapped == [0.0, 0.0], overlapped
    assert "The actor's update runs alone: this run has no critic" in (out / LOG_FILE).read_text(errors="replace")
else:
    assert all("critic/vf_loss" in s for s in steps) and overlapped == [1.0, 1.0], overlapped
print(f"{algo} dry run: 2 steps, split/overlapped {overlapped}")
if shared:
    # Step 1 follows the push at start-up with no critic update running: both pools generate, whatever the machine's
    # load. Step 2's share depends on when the critic's update ended (the late join, auto on CPU): logged, not judged.
    log = (out / LOG_FILE).read_text(errors="replace")
    assert "shared rollout: 1 rollout replica(s) on the critic pool" in log, "no critic-pool replica started"
    shares = [s.get("split/critic_pool_rollout_share") for s in steps]
    assert None not in shares and 0.0 < shares[0] < 1.0 and steps[0]["split/critic_pool_joined"] == 1.0, shares
    print(f"shared rollout: split/critic_pool_rollout_share {shares}")
PY
}

declare -A dirs
for release in "$@"; do
    dir=$out/$release
    rm -rf "$dir" && mkdir -p "$dir"
    dirs[$release]=$dir
    echo install >"$dir/step"
    if scripts/release-env.sh "$release" >"$dir/env" 2>"$dir/install.log"; then
        echo "$SECONDS" >"$dir/installed"
    else
        echo 1 >"$dir/result"
    fi
done

running=0
for release in "$@"; do
    dir=${dirs[$release]}
    [[ -f $dir/result ]] && continue
    while ((running >= jobs)); do wait -n; running=$((running - 1)); done
    (
        start=$SECONDS
        check "$release" "$dir"
        echo $? >"$dir/result"
        echo $((SECONDS - start)) >"$dir/seconds"
    ) &
    running=$((running + 1))
done
wait

passed=0 failed=0
for release in "$@"; do
    dir=${dirs[$release]}
    echo "=== verl $release"
    cat "$dir/preflight.txt" 2>/dev/null
    if [[ $(cat "$dir/result") == 0 ]]; then
        passed=$((passed + 1))
        echo "verl $release: passed (preflight and 2-step split dry run in $(cat "$dir/seconds") s, after its install)"
    else
        failed=$((failed + 1))
        echo "verl $release: FAILED at the $(cat "$dir/step") (logs in $dir)"
        for log in "$dir"/*.log; do echo "--- $log"; tail -25 "$log"; done
    fi
done
echo "release checks took $((SECONDS - started)) s in all"
echo "releases: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
