"""The GPU install follows verl's own: verl's environment first, as verl documents it, then verl-split from a checkout.

verl 0.9.1 installs its CUDA stack with uv from its own lock and indexes (its sdist's pyproject.toml,
``[tool.uv.sources]`` and ``[[tool.uv.index]]``: torch from ``https://download.pytorch.org/whl/cu130``,
flash-attn prebuilt from ``https://verl-project.github.io/verl-wheelhouse/simple/``). A Python extra names
packages, never an index (PEP 508; PyPI refuses direct URLs in uploaded metadata), so an extra of ours
standing for ``verl[vllm,fsdp]`` made pip re-resolve that stack from PyPI: flash-attn from its sdist (a CUDA
build; it fails at once without torch in the build environment). verl-split has no GPU extra. What is held
here, without a download: no extra brings verl's GPU stack; verl-split's own requirements are met by verl's
uv lock, so installing verl-split into verl's environment installs verl-split alone (pip's own dry run
of it: ``tests/project/test_install_dry_run.py``, network tier); verl's GPU extras, the ones its uv workflow syncs,
bring what the GPU path imports; the two docs say so.
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
from support.paths import ROOT

from verl_split.core import compat

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.unit

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
DEPENDENCIES = [Requirement(line) for line in PYPROJECT["project"]["dependencies"]]
#: verl's GPU stack: what an extra of ours must never pull through pip.
GPU_STACK = {"verl", "vllm", "flash-attn", "torch", "torchvision", "torchaudio", "cupy-cuda13x", "sglang"}
#: The versions verl's uv lock installs (verl-project/verl uv.lock at 1dda039, 2026-08-22, the newest lock
#: read: the 0.9.1 sdist ships none): ray :3374-3375, torch :4072-4073, wrapt :5010-5011,
#: hydra-core :1292-1293, packaging :2709-2710. verl itself is the release installed.
VERL_LOCK = {"ray": "2.55.1", "torch": "2.11.0+cu130", "wrapt": "2.2.1", "hydra-core": "1.3.3", "packaging": "25.0"}
#: Distributions the GPU path imports, and verl 0.9's extras that verl's uv workflow syncs for FSDP + vLLM
#: (``uv sync --extra vllm --extra fsdp``): vLLM (the rollout), torch, flash-attn (actor and critic load with
#: flash_attention_2), TransferQueue (the v1 TaskRunner, verl/trainer/main_ppo.py), cupy (shared rollout's
#: NCCL push, verl/checkpoint_engine/nccl_checkpoint_engine.py).
VERL_GPU_EXTRAS = {"vllm", "fsdp"}
NEEDED = {"vllm", "torch", "flash-attn", "transferqueue", "cupy-cuda13x"}
DOCS = ["README.md", "docs/configuration.md"]


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


def install_section(doc: str) -> str:
    """The "Installing for GPUs" section of a doc, up to the next heading of its level or above."""
    text = (ROOT / doc).read_text()
    match = re.search(r"^(#+) Installing for GPUs\n(.*?)(?=^#{1,%d} |\Z)", text, re.M | re.S)
    assert match, f"{doc}: no 'Installing for GPUs' section"
    return match.group(2)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_no_extra_brings_verls_gpu_stack(extra):
    for line in EXTRAS[extra]:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == "verl-split":
            continue  # one of our extras naming another: checked as that one
        assert canonicalize_name(requirement.name) not in GPU_STACK, f"[{extra}] {line}: install verl as verl does"


@pytest.mark.parametrize("gone", ["gpu", "gpu-verl08", "gpu-verl07", "vllm"])
def test_the_old_gpu_extras_are_gone(gone):
    # pip warns that verl-split has no such extra and installs verl-split alone (tests/project/test_install_dry_run.py).
    assert gone not in EXTRAS


@pytest.mark.parametrize("requirement", DEPENDENCIES, ids=str)
def test_verls_uv_lock_meets_each_requirement(requirement):
    """So pip leaves verl's environment as it is: nothing to upgrade, nothing to add."""
    name = canonicalize_name(requirement.name)
    if name == "verl":
        assert requirement.specifier.contains(compat.installed_version(), prereleases=True)
        return
    assert requirement.specifier.contains(VERL_LOCK[name], prereleases=True), (name, VERL_LOCK[name])


def test_verls_gpu_extras_bring_what_the_gpu_path_imports_at_exact_pins():
    version = compat.installed_version()
    if compat.family_of(version) != "0.9":
        pytest.skip("verl 0.9's extras (vllm, fsdp)")
    brought = closure("verl", VERL_GPU_EXTRAS)
    missing = NEEDED - set(brought)
    assert not missing, f"verl {version}[vllm,fsdp] brings no {sorted(missing)}"
    for name in ("vllm", "torch", "flash-attn", "cupy-cuda13x"):
        assert str(brought[name].specifier).startswith("=="), brought[name]


def test_the_ray_floor_is_below_the_tested_ray_and_above_verls():
    (ray,) = [d for d in DEPENDENCIES if canonicalize_name(d.name) == "ray"]
    floor = Version(re.search(r">=\s*([\d.]+)", str(ray.specifier)).group(1))
    assert floor <= Version(compat.installed_version("ray"))
    verl_ray = [Requirement(r) for r in metadata.requires("verl") or () if Requirement(r).name == "ray"][0]
    verl_floor = Version(re.search(r">=\s*([\d.]+)", str(verl_ray.specifier)).group(1))
    # Above verl's own only as far as bundle_label_selector needs (runtime/placement/pools.py docstring).
    assert verl_floor <= floor <= Version("2.49"), (verl_floor, floor)


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_install_verl_as_verl_does_then_verl_split(doc):
    section = install_section(doc)
    commands = "".join(re.findall(r"```bash\n(.*?)```", section, re.S))
    assert "pip install /path/to/verl-split" in commands  # from a checkout or its wheel: not yet on PyPI
    assert "verl-split[" not in commands, "no GPU extra any more"
    # verl's two documented ways: its uv workflow (with the extras above) and its Docker images.
    assert "uv sync --python 3.12 --extra vllm --extra fsdp" in section
    assert "manage_envs.py sync vllm fsdp" in section
    assert "verlai/verl" in section
    assert "docs/start/install.rst" in section


#: Where a user copies an install line from: every doc's ``bash`` blocks, the shipped scripts and the examples'.
#: (Prose may name a gone extra to say why it went: docs/configuration.md, "Why no [gpu] extra".)
ADVICE = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").rglob("*.md")),
    *sorted((ROOT / "examples").rglob("*.sh")),
    *sorted(path for path in (ROOT / "scripts").glob("*") if path.is_file()),  # not a __pycache__ folder
]


def extras_advised(path: Path) -> set[str]:
    """The extras of verl-split ``path`` tells a user to install: in a doc's bash blocks, anywhere in a script."""
    text = path.read_text()
    if path.suffix == ".md":
        text = "".join(re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M))
    return {extra.strip() for names in re.findall(r"verl-split\[([^\]]*)\]", text) for extra in names.split(",")}


@pytest.mark.parametrize("path", ADVICE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_install_line_names_a_gone_extra(path):
    assert extras_advised(path) <= set(EXTRAS), f"{path.name}: install verl as verl does, then verl-split"


#: Whether verl-split is on PyPI. Until it is, no doc or script may tell a user to install it by name from an index.
PUBLISHED = False
_INSTALL_BY_NAME = re.compile(r"^\s*(?:uv )?pip install (?:-\S+ )*['\"]?verl-split\b(?![/.\w-])", re.M)


def installs_by_name(path: Path) -> list[str]:
    """The lines of ``path`` that install verl-split from a package index by its name: a doc's bash blocks, or
    anywhere in a script."""
    text = path.read_text()
    if path.suffix == ".md":
        text = "".join(re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M))
    return [match.group(0).strip() for match in _INSTALL_BY_NAME.finditer(text)]


@pytest.mark.parametrize("path", ADVICE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_install_line_asks_pypi_for_an_unpublished_package(path):
    """issue 54: `pip install verl-split` found no distribution, and it was the only install line."""
    if PUBLISHED:
        pytest.skip("verl-split is on PyPI")
    assert not installs_by_name(path), f"{path.name}: verl-split is not on PyPI; install from a checkout or a wheel"


def test_the_by_name_check_finds_an_index_install_and_leaves_a_path_alone(tmp_path):
    (tmp_path / "doc.md").write_text(
        "`pip install verl-split` once published.\n```bash\npip install verl-split\nuv pip install -q 'verl-split'\n"
        "pip install /path/to/verl-split\npip install ./verl-split\npip install verl-split-0.1.whl\n```\n"
    )
    assert installs_by_name(tmp_path / "doc.md") == ["pip install verl-split", "uv pip install -q 'verl-split"]


def test_the_advice_check_finds_a_gone_extra(tmp_path):
    (tmp_path / "doc.md").write_text("Why no `verl-split[gpu]`.\n```bash\npip install 'verl-split[gpu,cpu]'\n```\n")
    (tmp_path / "run.sh").write_text("# Install: see the README (verl-split[vllm]).\n")
    assert extras_advised(tmp_path / "doc.md") == {"gpu", "cpu"}
    assert extras_advised(tmp_path / "run.sh") == {"vllm"}
