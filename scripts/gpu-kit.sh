#!/usr/bin/env bash
# The offline kit for a GPU machine that has CUDA torch, transformers and the usual scientific packages but no
# verl, Ray or network (`make gpukit`): the Python packages the one-GPU demo needs beyond such a machine, for its
# Python and x86-64, as one archive of an installed site folder, .gpukit/site.tar.xz (git-ignored; about 29 MiB).
# scripts/gpu_run.sh unpacks it there when verl and Ray are missing.
#
#   scripts/gpu-kit.sh            build .gpukit/site.tar.xz (needs pip and PyPI here), then check its size
#   scripts/gpu-kit.sh --check    check only: the kit is there, and the tree plus the kit fit the limit
#
# The size check adds the files that travel with the tree (git's tracked and untracked-not-ignored files) to
# .gpukit/ and compares the sum with GPUKIT_LIMIT_MIB (64). Exit status: 0 fine, 3 no kit, 4 over the limit,
# 1 the build failed.
# GPUKIT_DIR (.gpukit): where the kit goes. GPUKIT_PYTHON (3.12): the Python the kit is for (pip downloads that
# Python's wheels from any Python here);
# GPUKIT_TRANSFORMERS: a transformers==X tokenizers==Y pair for the kit to carry, for a machine whose own
# transformers does not work with verl (empty: the machine's own).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DEST=${GPUKIT_DIR:-$REPO/.gpukit}  # another folder for a kit beside the one that travels (a rehearsal's)
KIT=$DEST/site.tar.xz
LIMIT_MIB=${GPUKIT_LIMIT_MIB:-64}
PY_VERSION=${GPUKIT_PYTHON:-3.12}

check() {
  if [ ! -f "$KIT" ]; then
    echo "gpu-kit: no kit at $KIT: build it with 'make gpukit' (needs PyPI)" >&2
    return 3
  fi
  local tree kit
  tree=$(cd "$REPO" && git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  kit=$(du -sb "$DEST" | cut -f1)
  awk -v t="$tree" -v k="$kit" -v l="$LIMIT_MIB" 'BEGIN {
    printf "gpu-kit: the tree %.2f MiB + the kit %.2f MiB = %.2f MiB (limit %d MiB)\n", t/2^20, k/2^20, (t+k)/2^20, l
    exit (t + k > l * 2^20) }' || {
    echo "gpu-kit: the tree and the kit are over ${LIMIT_MIB} MiB: remove large untracked files, or ignore them" >&2
    return 4
  }
}

if [ "${1:-}" = --check ]; then
  check
  exit $?
fi

B=$(mktemp -d "${TMPDIR:-/tmp}/gpukit_build.XXXXXX")
trap 'rm -rf "$B"' EXIT
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
TARGET=(--only-binary=:all: --python-version "$PY_VERSION" --implementation cp "${PLATFORMS[@]}")
# verl 0.9.1 and what it imports that such a machine lacks, at the versions the project's tests run (its own
# transformers, tokenizers, numpy, pyarrow, fsspec, pandas, packaging, safetensors, accelerate are kept).
PACKAGES=(verl==0.9.1 ray==2.60.0 codetiming==1.4.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  hydra-core==1.3.8 omegaconf==2.3.1 tensordict==0.10.0 orjson==3.13.0 pyvers==0.1.0 importlib-metadata==10.2.0
  torchdata==0.11.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  transferqueue==0.1.11 pyzmq==27.3.0 msgspec==0.22.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
  typing-inspection==0.4.5 fastapi==0.165.0 starlette==1.10.0 opentelemetry-api==1.45.2 uvicorn==0.54.0
  cachetools==8.0.2 wrapt==2.5.2)
# shellcheck disable=SC2206
[ -n "${GPUKIT_TRANSFORMERS:-}" ] && PACKAGES+=($GPUKIT_TRANSFORMERS)
mkdir -p "$B/whl" "$DEST"
echo "gpu-kit: downloading the wheels for Python $PY_VERSION"
pip download -q --no-deps "${TARGET[@]}" -d "$B/whl" "${PACKAGES[@]}"
pip wheel -q --no-deps -w "$B/whl" antlr4-python3-runtime==4.9.3  # hydra's parser: a pure-Python sdist only
pip install -q --no-deps --no-compile --no-index "${TARGET[@]}" --platform any --target "$B/site" "$B"/whl/*.whl
# Ray: its core (gcs_server, raylet, _raylet.so, the Python API, the dashboard and runtime-env agents) without
# Java, the web UI and the libraries verl never imports, the binaries without their symbol tables: 193 -> 101 MiB.
R=$B/site/ray
rm -rf "$R/jars" "$R/dashboard/client" "$R"/{rllib,data,serve,train,tune,llm,air,workflow} \
  "$R/dashboard/modules"/{serve,train,data}
strip --strip-unneeded "$R/_raylet.so" "$R/core/src/ray/gcs/gcs_server" "$R/core/src/ray/raylet/raylet" \
  "$R/core/libjemalloc.so"
# verl-split's `verl.plugins` entry point, for the tree on PYTHONPATH (no wheel of verl-split travels).
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$REPO/verl_split/__init__.py")
INFO=$B/site/verl_split-$VERSION.dist-info
mkdir -p "$INFO"
printf 'Metadata-Version: 2.1\nName: verl-split\nVersion: %s\n' "$VERSION" > "$INFO/METADATA"
printf '[verl.plugins]\nverl_split = verl_split._bootstrap\n' > "$INFO/entry_points.txt"
find "$B/site" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$B/site" -cf - . | xz -T1 -6 > "$KIT.part" && mv "$KIT.part" "$KIT"
du -sb "$B/site" | awk '{printf "gpu-kit: %.1f MiB unpacked\n", $1/2^20}'
stat -c '%s' "$KIT" | awk -v k="$KIT" '{printf "gpu-kit: %s, %d bytes (%.2f MiB)\n", k, $1, $1/2^20}'
check
