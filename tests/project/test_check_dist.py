"""scripts/check_dist.py finds what a built wheel or sdist lacks: a module, the start-up file, an entry point,
the metadata an index shows. Checked on archives written here (its own logic); `make dist` runs it on the real
build, and `make test-dist` installs that build and runs it.
"""

from __future__ import annotations

import importlib.util
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.unit

_spec = importlib.util.spec_from_file_location("check_dist", ROOT / "scripts" / "check_dist.py")
check_dist = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_dist)

VERSION = "1.2.3"
INFO = f"verl_split-{VERSION}.dist-info"
MODULES = {"verl_split/__init__.py", "verl_split/tools/cli.py"}
METADATA = (
    f"Metadata-Version: 2.4\nName: verl-split\nVersion: {VERSION}\nSummary: split placement\n"
    "License-Expression: Apache-2.0\nRequires-Python: >=3.10\nRequires-Dist: verl>=0.7.0\n\n# verl-split\n"
)
ENTRY_POINTS = (
    "[console_scripts]\nverl-split = verl_split.tools.cli:main\n\n[verl.plugins]\nverl_split = verl_split._bootstrap\n"
)


def write_wheel(path: Path, leave_out: str = "", metadata: str = METADATA) -> Path:
    files = {
        **dict.fromkeys(MODULES, ""),
        "verl_split_activate.pth": "import os\n",
        f"{INFO}/METADATA": metadata,
        f"{INFO}/entry_points.txt": ENTRY_POINTS,
        f"{INFO}/licenses/LICENSE": "Apache License\n",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            if name != leave_out:
                archive.writestr(name, text)
    return path


def test_a_complete_wheel_passes(tmp_path):
    assert check_dist.wheel_problems(write_wheel(tmp_path / "w.whl"), MODULES, VERSION) == []


@pytest.mark.parametrize(
    ("leave_out", "said"),
    [
        ("verl_split/tools/cli.py", "module(s) of verl_split/ left out, e.g. verl_split/tools/cli.py"),
        ("verl_split_activate.pth", "verl 0.7/0.8 would never load verl-split"),
        (f"{INFO}/entry_points.txt", "no entry point [verl.plugins] verl_split = verl_split._bootstrap"),
        (f"{INFO}/licenses/LICENSE", "no LICENSE"),
    ],
)
def test_a_wheel_without_a_part_is_refused_naming_it(tmp_path, leave_out, said):
    problems = check_dist.wheel_problems(write_wheel(tmp_path / "w.whl", leave_out), MODULES, VERSION)
    assert any(said in problem for problem in problems), problems


def test_metadata_an_index_shows_is_checked(tmp_path):
    metadata = METADATA.replace("License-Expression: Apache-2.0\n", "").replace("Version: 1.2.3", "Version: 9")
    problems = check_dist.wheel_problems(write_wheel(tmp_path / "w.whl", metadata=metadata), MODULES, VERSION)
    assert any("License-Expression is None" in problem for problem in problems), problems
    assert any("Version is '9', not 1.2.3" in problem for problem in problems), problems


def test_the_sdist_needs_what_a_build_from_it_reads(tmp_path):
    sdist = tmp_path / f"verl_split-{VERSION}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name in ("pyproject.toml", "README.md", "verl_split/__init__.py", "verl_split_activate.pth"):
            member = tarfile.TarInfo(f"verl_split-{VERSION}/{name}")
            archive.addfile(member, io.BytesIO(b""))
    assert check_dist.sdist_problems(sdist) == [f"{sdist.name}: no LICENSE"]


def test_the_checkouts_modules_are_the_packages():
    modules = check_dist.package_modules()
    assert "verl_split/tools/cli.py" in modules and "verl_split/_bootstrap.py" in modules
    assert check_dist.version_of() == check_dist.version_of(ROOT)


def test_a_dist_folder_without_one_of_each_is_refused(tmp_path, capsys):
    assert check_dist.main([str(tmp_path)]) == 1
    assert "not one of each: run `make dist`" in capsys.readouterr().err
