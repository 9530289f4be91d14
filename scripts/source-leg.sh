#!/usr/bin/env bash
# The test leg of a verl source snapshot that is on no package index (verl's `neo` or `main` branch, packed as
# verl-NAME-COMMIT.tar.gz in VERL_SRC_DIR, default .verl-src/; in a clone of verl, e.g.
# `git archive --prefix=verl/ -o DIR/verl-neo-$(git rev-parse --short neo).tar.gz neo`): its environment from the
# source tree (scripts/source-env.sh -> .venvs/verl-NAME), then
#   1. the preflight: `VERL_SPLIT=1 verl-split doctor --json`, every feature available;
#   2. the split demo with every overlap and shared rollout: `verl-split demo --steps 2` with VERL_SPLIT=1 and
#      VERL_SPLIT_SHARED_ROLLOUT=1, on verl's own default trainer there (RayPPOTrainer on neo, v1 on main), each
#      step generated on both pools with the overlaps on;
#   3. where that default trainer is RayPPOTrainer (v0): the e2e pair bit for bit, split with shared rollout and
#      the deferral against the same run without shared rollout (tests/e2e/test_shared_rollout_v0_e2e.py).
#   scripts/source-leg.sh neo        # = make test-source VERL_SRC=neo
#   scripts/source-leg.sh main
# Not in `make test` (CI time): each leg builds an environment (a few minutes) and runs 3 dry runs (~5 min).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 1 ]] || { echo "usage: $0 NAME  (neo or main: an archive verl-NAME-*.tar.gz in \$VERL_SRC_DIR)" >&2; exit 2; }
name=$1
src=${VERL_SRC_DIR:-.verl-src}
archive=$(ls "$src"/verl-"$name"-*.tar.gz 2>/dev/null | head -1)
[[ -n $archive ]] || { echo "no $src/verl-$name-*.tar.gz (set VERL_SRC_DIR to the folder of verl's packed sources)" >&2; exit 2; }
started=$SECONDS
tree=.venvs/src-$name
venv=.venvs/verl-$name
stamp=$venv/.built-from
if [[ ! -f $stamp || $(cat "$stamp") != "$(basename "$archive")" ]]; then
    rm -rf "$tree" && mkdir -p "$tree" && tar -xzf "$archive" -C "$tree"
    scripts/source-env.sh "$(ls -d "$tree"/*/ | head -1)" "$name"
    basename "$archive" >"$stamp"
fi
bin=$venv/bin
out=.venvs/source-leg-$name
rm -rf "$out" && mkdir -p "$out"

echo "== verl $name ($(basename "$archive")): preflight"
VERL_SPLIT=1 "$bin/verl-split" doctor --json >"$out/doctor.json" 2>"$out/doctor.log"
"$bin/python" - "$out/doctor.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
missing = {k: f["reason"] for k, f in report["preflight"].items() if not f["available"]}
assert not missing, f"features not available: {missing}"
assert report["healthy"] and report["supported"] and report["active"], report["problems"]
print(f"verl {report['verl_version']}: {', '.join(f['label'] for f in report['preflight'].values())} available")
PY

echo "== verl $name: the split demo, every overlap and shared rollout (2 steps)"
trainer=$("$bin/python" -c 'from verl_split.dryrun.recipe import default_trainer; print(default_trainer())')
if ! VERL_SPLIT=1 VERL_SPLIT_SHARED_ROLLOUT=1 "$bin/verl-split" demo --steps 2 --out "$out/demo" \
    "ray_kwargs.ray_init._temp_dir=/tmp/ray_vs_$name" >"$out/demo.log" 2>&1; then
    tail -40 "$out/demo.log"; echo "verl $name: the demo failed ($out/demo.log)"; exit 1
fi
"$bin/python" - "$out/demo/metrics.jsonl" "$trainer" <<'PY'
import json, sys
records = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]  # verl's file logger: {step, data}
assert [r["step"] for r in records] == [1, 2], [r.get("step") for r in records]
steps = [r.get("data", r) for r in records]
for m in steps:
    assert 0.0 < m["split/critic_pool_rollout_share"] < 1.0, m  # both pools generated
    assert m["split/overlapped"] == 1.0 and m["split/prep_overlapped"] == 1.0, m  # the update and prep overlaps
assert steps[0]["split/critic_update_deferred"] == 1.0, steps[0]  # step 1's critic update ran on into step 2
print(f"trainer {sys.argv[2]}: both pools generated in every step, every overlap on, step 1's critic update deferred")
PY

if [[ $trainer == v0 ]]; then
    echo "== verl $name: RayPPOTrainer, shared rollout with the deferral against the run without (bit for bit)"
    "$bin/python" -m pytest -q -p no:cacheprovider --extended --basetemp="$out/pytest" \
        tests/e2e/test_shared_rollout_v0_e2e.py
fi
echo "verl $name: passed in $((SECONDS - started)) s"
