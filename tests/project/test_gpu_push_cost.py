"""``benchmarks/gpu_push_cost.py``: its code runs (on CPU, small), its shapes are the models they name, and the
memory check's per-process allowance covers what the benchmark measured on a GPU (the saved H200 figures)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from verl_split.placement.memory import CONTEXT_GB_PER_PROCESS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("gpu_push_cost", ROOT / "benchmarks" / "gpu_push_cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_it_runs_small_on_cpu_and_writes_its_rows(tmp_path):
    out = tmp_path / "out.json"
    assert load_benchmark().main(["--allow-cpu", "--repeats", "1", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["models"]
    assert row["buckets_filled"] >= 2 and row["pack_s"] and row["gpu_to_host_s"] and row["host_to_gpu_s"]


def test_without_cuda_and_without_allow_cpu_it_says_so(capsys):
    bench = load_benchmark()
    if bench.torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert bench.main([]) == 2
    assert "no CUDA device here" in capsys.readouterr().err


def test_the_shapes_have_the_parameter_counts_of_the_models_they_name():
    models = load_benchmark().MODELS
    # Qwen2.5-7B: 7.61B parameters; Llama-3-70B: 70.6B (their model cards).
    assert round(models["7B"].params() / 1e9, 2) == 7.62
    assert round(models["70B"].params() / 1e9, 1) == 70.6


def test_the_per_process_allowance_covers_the_gpu_measurement():
    measured = json.loads((ROOT / "benchmarks" / "gpu_push_cost_h200.json").read_text())["context"]
    # The actor's worker at the push: its CUDA context, FSDP's torch communicator and the push's cupy one.
    actor_worker_gib = sum(measured[k] for k in ("cuda_context_mib", "nccl_one_rank_mib", "cupy_nccl_one_rank_mib"))
    assert actor_worker_gib / 1024 <= CONTEXT_GB_PER_PROCESS
