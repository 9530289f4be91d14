"""The GPU install line brings what the GPU path imports, at verl's own pins: read from the metadata.

No download and no CUDA wheel: ``pyproject.toml``'s extras are read as text, and verl's extras from
the installed verl's metadata (``importlib.metadata``). What the GPU path imports, and where:
vLLM (the rollout), torch, flash-attn (actor and critic load with ``flash_attention_2``),
TransferQueue (verl 0.9's v1 TaskRunner, ``verl/trainer/main_ppo.py``), and cupy (shared rollout's
NCCL weight push, ``verl/checkpoint_engine/nccl_checkpoint_engine.py``). Whether pip resolves the
line against the package index is checked by hand (docs/configuration.md, Installing for GPUs), not here: it
needs the network.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from verl_split.core import compat

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
#: The GPU extra of each family, and verl's extras it must stand for.
GPU_EXTRAS = {
    "0.9": ("gpu", {"vllm", "fsdp"}),
    "0.8": ("gpu-verl08", {"vllm", "gpu"}),
    "0.7": ("gpu-verl07", {"vllm", "gpu"}),
}
#: Distributions the GPU path imports, per family (0.7/0.8 have no v1 trainer and no shared rollout).
NEEDED = {
    "0.9": {"vllm", "torch", "flash-attn", "transferqueue", "cupy-cuda13x"},
    "0.8": {"vllm", "flash-attn"},
    "0.7": {"vllm", "flash-attn"},
}


def verl_requirement(extra: str) -> Requirement:
    (line,) = EXTRAS[extra]
    requirement = Requirement(line)
    assert canonicalize_name(requirement.name) == "verl", line
    return requirement


def closure(distribution: str, extras: set[str]) -> dict[str, Requirement]:
    """Every requirement an install of ``distribution[extras]`` brings from its own metadata (one level,
    following the distribution's references to its own extras, as verl[vllm] -> verl[verl-core])."""
    found: dict[str, Requirement] = {}
    todo, seen = set(extras), set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for line in metadata.requires(distribution) or ():
            requirement = Requirement(line)
            if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
                continue
            if canonicalize_name(requirement.name) == canonicalize_name(distribution):
                todo |= set(requirement.extras) - seen
                continue
            found[canonicalize_name(requirement.name)] = requirement
    return found


@pytest.mark.parametrize("family", sorted(GPU_EXTRAS))
def test_each_family_has_a_gpu_extra_on_verls_own_gpu_extras(family):
    extra, verl_extras = GPU_EXTRAS[family]
    requirement = verl_requirement(extra)
    assert requirement.extras == verl_extras
    assert requirement.specifier.contains(f"{family}.0") and requirement.specifier.contains(f"{family}.9")
    others = [f for f in GPU_EXTRAS if f != family]
    assert not any(requirement.specifier.contains(f"{other}.0") for other in others), requirement


def test_the_old_vllm_extra_is_the_gpu_extra():
    assert EXTRAS["vllm"] == ["verl-split[gpu]"]


def test_the_installed_familys_gpu_extra_brings_what_the_gpu_path_imports_at_verls_pins():
    version = compat.installed_version()
    family = compat.family_of(version)
    extra, verl_extras = GPU_EXTRAS[family]
    assert verl_requirement(extra).specifier.contains(version)
    brought = closure("verl", verl_extras)
    missing = NEEDED[family] - set(brought)
    assert not missing, f"verl {version}[{','.join(sorted(verl_extras))}] brings no {sorted(missing)}"
    if family == "0.9":
        # verl pins them exactly: the extra brings verl's versions, not the newest on the index.
        for name in ("vllm", "torch", "flash-attn", "cupy-cuda13x"):
            assert str(brought[name].specifier).startswith("=="), brought[name]


def test_the_ray_floor_is_below_the_tested_ray_and_above_verls():
    (line,) = [d for d in PYPROJECT["project"]["dependencies"] if canonicalize_name(Requirement(d).name) == "ray"]
    floor = Version(re.search(r">=\s*([\d.]+)", line).group(1))
    assert floor <= Version(compat.installed_version("ray"))
    verl_ray = [Requirement(r) for r in metadata.requires("verl") or () if Requirement(r).name == "ray"][0]
    verl_floor = Version(re.search(r">=\s*([\d.]+)", str(verl_ray.specifier)).group(1))
    # Above verl's own only as far as bundle_label_selector needs (runtime/placement/pools.py docstring).
    assert verl_floor <= floor <= Version("2.49"), (verl_floor, floor)


@pytest.mark.parametrize(
    "doc",
    [
        "README.md",
        "docs/configuration.md",
        "examples/split_placement/README.md",
        "examples/split_placement/README_zh.md",
    ],
)
def test_the_docs_install_line_is_the_gpu_extra(doc):
    text = (ROOT / doc).read_text()
    assert "pip install 'verl-split[gpu]'" in text or "'verl-split[gpu]'" in text
    assert "verl-split[vllm]" not in text
