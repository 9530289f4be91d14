"""The package's shape, held by tests: no import circle, no module over the length alarm, every test file in a tier
and in the folder of ``tests/`` that mirrors the package folder it tests.

The layout itself (what each folder holds, who imports whom) is in docs/development.md. Read from the
source with ``ast``: nothing is imported.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.unit

PACKAGE = ROOT / "verl_split"
#: The tiers a test file belongs to, one each (pyproject.toml's markers say what each means).
TIERS = ("unit", "subprocess", "e2e", "network", "vllm")
#: A smell alarm, not a rule for where to cut: a module is cut where its code has a seam of its own (one job,
#: named by the file), and a module past this many lines is one to read again for a second job inside it.
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports, at module level or inside a function (a lazy import is a
    dependency too: it only moves the moment it is paid)."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    typing_only = {
        id(inner)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for inner in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:  # `if TYPE_CHECKING:` imports run only for the type checker
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            # `from package import module` depends on that module; `from module import name`, on the module.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found - {module_name(path)}


@functools.cache  # read once per process: the source does not change while the tests run
def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(paths)) for name, path in paths.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle (its modules, the first repeated at the end), or none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                circle = visit(nxt)
                if circle:
                    return circle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            circle = visit(node)
            if circle:
                return circle
    return []


def test_no_import_circle_inside_the_package():
    assert find_circle(import_graph()) == []


def test_the_circle_finder_finds_one():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) == []


#: Arrows that would run back up the house (docs/development.md's diagram): (importer's package, imported one).
ONE_WAY = [
    ("verl_split.plugin", "verl_split.runtime"),  # the registry sits below the features it lists (issue 28)
    ("verl_split.plugin", "verl_split.seam_catalogue"),  # the catalogue hands the seam tables down to it
    ("verl_split.runtime", "verl_split.seam_catalogue"),  # a hook finds the catalogue its activation installed
]


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports_up(graph: dict[str, set[str]], lower: str, upper: str) -> list[tuple[str, str]]:
    """Each (importer, imported) pair where a module of ``lower`` imports one of ``upper``."""
    return sorted(
        (name, dep) for name, deps in graph.items() if inside(name, lower) for dep in deps if inside(dep, upper)
    )


@pytest.mark.parametrize("lower, upper", ONE_WAY, ids=lambda name: name.removeprefix("verl_split."))
def test_no_import_runs_back_up(lower, upper):
    assert imports_up(import_graph(), lower, upper) == [], f"{lower} must not import {upper} (docs/development.md)"


def test_the_one_way_check_finds_an_import_back_up():
    graph = {
        "verl_split.plugin.activation": {"verl_split.runtime.cpu.seams", "verl_split.core.log"},
        "verl_split.plugins_elsewhere": {"verl_split.runtime.cpu"},  # another package, only a shared prefix
        "verl_split.runtime.cpu.seams": {"verl_split.plugin.seam"},
    }
    assert imports_up(graph, "verl_split.plugin", "verl_split.runtime") == [
        ("verl_split.plugin.activation", "verl_split.runtime.cpu.seams")
    ]
    assert imports_up(graph, "verl_split.runtime", "verl_split.seam_catalogue") == []


def long_modules(package: Path) -> dict[str, int]:
    """The modules under ``package`` over MAX_LINES lines, with their length."""
    lengths = {p: len(p.read_text().splitlines()) for p in package.rglob("*.py")}
    return {str(p.relative_to(package)): n for p, n in lengths.items() if n > MAX_LINES}


def test_no_module_past_the_length_alarm():
    long = long_modules(PACKAGE)
    assert long == {}, (
        f"over {MAX_LINES} lines: {long}. Read each for a second job and cut it out where the code has a seam "
        "of its own; the count only says where to look, cohesion says where to cut (docs/development.md)"
    )


def test_the_length_check_finds_a_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path) == {"long.py": MAX_LINES + 1}


def tiers_of(path: Path) -> list[str]:
    """The tier markers of a test file's module-level ``pytestmark``."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            names = [m.attr if isinstance(m, ast.Attribute) else getattr(m.func, "attr", "") for m in marks]
            return [name for name in names if name in TIERS]
    return []


@pytest.mark.parametrize("path", sorted((ROOT / "tests").rglob("test_*.py")), ids=lambda p: p.name)
def test_every_test_file_is_in_one_tier(path):
    assert len(tiers_of(path)) == 1, f"{path.name}: put `pytestmark = pytest.mark.<tier>` (one of {TIERS}) at the top"


def test_the_tier_check_finds_a_file_without_a_tier_and_one_with_two(tmp_path):
    cases = {
        "none": "import pytest\n",
        "other_mark_only": "import pytest\npytestmark = pytest.mark.ray\n",
        "two": "import pytest\npytestmark = [pytest.mark.unit, pytest.mark.e2e]\n",
        "one": "import pytest\npytestmark = [pytest.mark.subprocess, pytest.mark.ray]\n",
    }
    found = {}
    for name, text in cases.items():
        (tmp_path / f"test_{name}.py").write_text(text)
        found[name] = tiers_of(tmp_path / f"test_{name}.py")
    assert found == {"none": [], "other_mark_only": [], "two": ["unit", "e2e"], "one": ["subprocess"]}


#: Folders of ``tests/`` that mirror no package folder: the end-to-end runs of verl's trainer, the project's own
#: files (docs, examples, install, this layout), and the helpers (no tests there).
NOT_ROOMS = ("e2e", "project", "on_vllm")


def misplaced_tests(tests: Path, package: Path) -> list[str]:
    """Test files not in a folder that mirrors one of ``package``'s (or in ``NOT_ROOMS``), relative to ``tests``."""
    misplaced = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests)
        if folder.parts[:1] in [(room,) for room in NOT_ROOMS]:
            continue
        if not folder.parts or not (package / folder / "__init__.py").is_file():
            misplaced.append(str(path.relative_to(tests)))
    return misplaced


def test_each_test_file_sits_in_the_folder_of_the_room_it_tests():
    assert misplaced_tests(ROOT / "tests", PACKAGE) == [], (
        "put each test file in the tests/ folder named like the verl_split/ folder of the code it tests "
        f"(or in tests/{{{','.join(NOT_ROOMS)}}}); docs/development.md has the map"
    )


def test_the_mirror_check_finds_a_test_outside_every_room(tmp_path):
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    for folder in (package / "placement", package / "runtime" / "cpu"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    for test in (
        "placement/test_a.py",
        "runtime/cpu/test_b.py",
        "e2e/test_c.py",
        "test_top.py",
        "runtime/gpu/test_d.py",
    ):
        (tests / test).parent.mkdir(parents=True, exist_ok=True)
        (tests / test).write_text("")
    assert misplaced_tests(tests, package) == ["runtime/gpu/test_d.py", "test_top.py"]
