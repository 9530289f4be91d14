"""Check what `make dist` built before anyone installs it: python scripts/check_dist.py [DIST_DIR]

A wheel can build cleanly and still be useless: without ``verl_split_activate.pth`` verl 0.7/0.8 never load
verl-split, without the ``verl.plugins`` entry point verl 0.9 does not, and a module left out fails only when a
run reaches it. So the one wheel and the one sdist in DIST_DIR (default dist/) are read, not installed:

* the wheel holds every module of the checkout's ``verl_split/``, the start-up file at its root, the
  ``verl-split`` command and the ``verl.plugins`` entry point, and metadata an index shows (version, license,
  readme, requirements);
* the sdist holds what a build from it needs: pyproject.toml, the README it names, the license, the package.

One line per problem on stderr and exit 1; one summary line and exit 0 when all is there.
"""

from __future__ import annotations

import email.parser
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "verl_split"
START_UP_FILE = "verl_split_activate.pth"
#: (entry-point group, name, target) the wheel must declare.
ENTRY_POINTS = (
    ("console_scripts", "verl-split", "verl_split.tools.cli:main"),
    ("verl.plugins", "verl_split", "verl_split._bootstrap"),
)
#: Metadata fields an index shows, and the value each must have (None: present, any value).
METADATA = {"Name": "verl-split", "License-Expression": "Apache-2.0", "Summary": None, "Requires-Python": None}
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", f"{PACKAGE}/__init__.py", START_UP_FILE)


def package_modules(root: Path = ROOT) -> set[str]:
    """The checkout's modules, as paths inside a wheel (``verl_split/tools/cli.py``)."""
    return {path.relative_to(root).as_posix() for path in (root / PACKAGE).rglob("*.py")}


def entry_points(text: str) -> set[tuple[str, str, str]]:
    """(group, name, target) of an ``entry_points.txt``."""
    found, group = set(), None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
        elif "=" in line and group:
            name, _, target = line.partition("=")
            found.add((group, name.strip(), target.strip()))
    return found


def wheel_problems(wheel: Path, modules: set[str], version: str) -> list[str]:
    """What the wheel lacks, one line each."""
    problems = []
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next((n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA")), None)
        if info is None:
            return [f"{wheel.name}: no *.dist-info/METADATA: not a wheel"]
        missing = sorted(modules - names)
        if missing:
            problems.append(f"{wheel.name}: {len(missing)} module(s) of {PACKAGE}/ left out, e.g. {missing[0]}")
        if START_UP_FILE not in names:
            problems.append(f"{wheel.name}: no {START_UP_FILE} at its root: verl 0.7/0.8 would never load verl-split")
        listed = f"{info}/entry_points.txt"
        declared = entry_points(archive.read(listed).decode()) if listed in names else set()
        for group, name, target in ENTRY_POINTS:
            if (group, name, target) not in declared:
                problems.append(f"{wheel.name}: no entry point [{group}] {name} = {target}")
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        for field, wanted in {**METADATA, "Version": version}.items():
            if not metadata.get(field) or (wanted is not None and metadata[field] != wanted):
                problems.append(f"{wheel.name}: metadata {field} is {metadata.get(field)!r}, not {wanted or 'set'}")
        if not metadata.get_payload().strip():
            problems.append(f"{wheel.name}: no long description (the README an index shows)")
        if not any(line.startswith("verl") for line in metadata.get_all("Requires-Dist") or []):
            problems.append(f"{wheel.name}: does not require verl")
        if not any(n.startswith(f"{info}/licenses/") and n.endswith("LICENSE") for n in names):
            problems.append(f"{wheel.name}: no LICENSE in {info}/licenses/")
    return problems


def sdist_problems(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as archive:
        # Every member sits under one top folder, verl_split-VERSION/.
        names = {member.name.partition("/")[2] for member in archive.getmembers()}
    return [f"{sdist.name}: no {name}" for name in SDIST_FILES if name not in names]


def version_of(root: Path = ROOT) -> str:
    for line in (root / PACKAGE / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit(f"no __version__ in {PACKAGE}/__init__.py")


def main(argv: list[str]) -> int:
    dist = Path(argv[0]) if argv else ROOT / "dist"
    version = version_of()
    wheels = sorted(dist.glob(f"verl_split-{version}-*.whl"))
    sdists = sorted(dist.glob(f"verl_split-{version}.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(
            f"check_dist: {dist} holds {len(wheels)} wheel(s) and {len(sdists)} sdist(s) of verl-split {version}, "
            "not one of each: run `make dist` (it empties dist/ first)",
            file=sys.stderr,
        )
        return 1
    problems = wheel_problems(wheels[0], package_modules(), version) + sdist_problems(sdists[0])
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(
        f"check_dist: {wheels[0].name} and {sdists[0].name}: the package, {START_UP_FILE}, the entry points, "
        "the metadata"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
