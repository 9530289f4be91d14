"""Each row of ``verl_split.core.citations`` still says what it cites, in the installed verl and megatron-core.

The row's file is read from the installed package (found with ``importlib.util.find_spec``, never imported),
its symbol found with ``ast``, and its anchor looked for in that symbol's source. A row for other releases of
its library, or for a library not installed (megatron-core outside the 0.7 leg), is skipped with the reason.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from support.paths import ROOT

from verl_split.core import citations
from verl_split.core.citations import CITATIONS, Citation

pytestmark = pytest.mark.unit


def package_root(package: str) -> Path | None:
    """The folder holding ``package``'s top folder (site-packages, or a source tree), without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@cache
def _tree(path: Path) -> tuple[str, ast.Module]:
    text = path.read_text(encoding="utf-8")
    return text, ast.parse(text)


def _children(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a body, looking inside ``if`` / ``try`` blocks (a definition guarded by an import check)."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            found += _children(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            found += _children(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        else:
            found.append(node)
    return found


def symbol_source(text: str, tree: ast.Module, symbol: str) -> str | None:
    """The source of ``symbol`` (``function``, ``Class`` or ``Class.method``) in a module; None if not there."""
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for name in symbol.split("."):
        defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        node = next((n for n in _children(body) if isinstance(n, defs) and n.name == name), None)
        if node is None:
            return None
        body = node.body
    return ast.get_source_segment(text, node) if node is not None else None


def problem(row: Citation, root: Path) -> str | None:
    """What is wrong with ``row`` in the package under ``root``, naming the row; None when its anchor is there."""
    path = root / row.path
    where = f"citation {row.key!r} ({row.library} {row.path} {row.symbol})"
    if not path.is_file():
        return f"{where}: no file {path}"
    text, tree = _tree(path)
    source = symbol_source(text, tree, row.symbol)
    if source is None:
        return f"{where}: {path} defines no {row.symbol}"
    if row.anchor not in source:
        return f"{where}: {row.anchor!r} is no longer in {row.symbol}; read the installed source and fix the row"
    return None


def installed(row: Citation) -> tuple[Path | None, str]:
    """The package's root and why the row does not apply here (empty when it does)."""
    try:
        version = metadata.version(row.library)
    except metadata.PackageNotFoundError:
        return None, f"{row.library} is not installed"
    if row.releases and not SpecifierSet(row.releases).contains(version, prereleases=True):
        return None, f"{row.key} applies to {row.library} {row.releases}; {version} is installed"
    root = package_root(row.path.split("/")[0])
    if root is None:
        return None, f"{row.library} {version} is installed but its package is not importable"
    return root, ""


@pytest.mark.parametrize("key", sorted(CITATIONS))
def test_anchor_is_in_the_installed_source(key: str) -> None:
    row = CITATIONS[key]
    root, skip = installed(row)
    if root is None:
        pytest.skip(skip)
    found = problem(row, root)
    assert found is None, found


def test_rows_are_well_formed() -> None:
    assert len(CITATIONS) == len(citations.ROWS), "two rows share a key"
    for row in citations.ROWS:
        assert row.library in (citations.VERL, citations.MCORE), row.key
        assert row.path.split("/")[0] == ("verl" if row.library == citations.VERL else "megatron"), row.key
        assert row.path.endswith(".py") and row.anchor.strip() == row.anchor and row.anchor, row.key
        try:
            SpecifierSet(row.releases)
        except InvalidSpecifier:
            pytest.fail(f"citation {row.key!r}: releases {row.releases!r} is not a PEP 440 specifier")


def test_cite_names_file_and_symbol() -> None:
    assert citations.cite("mini_batch_split") == "TrainingWorker.train_mini_batch in verl/workers/engine_workers.py"


def test_every_row_is_cited() -> None:
    """A row nothing cites is a fact nobody reads: each key appears in the package outside the table (a message
    through ``cite``, a docstring by its key)."""
    package = Path(citations.__file__).resolve().parents[1]
    text = "\n".join(p.read_text() for p in package.rglob("*.py") if p.name != "citations.py")
    unused = [key for key in CITATIONS if not re.search(rf"\b{key}\b", text)]
    assert not unused, f"rows no module cites: {unused}"


def _fake_package(tmp_path: Path) -> Path:
    module = tmp_path / "verl" / "workers" / "fake.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "class Worker:\n    def update(self, batch):\n        assert len(batch) % 2 == 0\n\n"
        "def helper():\n    return 'len(batch) % 3 == 0'\n"
    )
    return tmp_path


def test_checker_passes_a_present_anchor(tmp_path: Path) -> None:
    row = Citation("fake_present", "verl", "verl/workers/fake.py", "Worker.update", "len(batch) % 2 == 0")
    assert problem(row, _fake_package(tmp_path)) is None


def test_checker_names_a_stale_anchor(tmp_path: Path) -> None:
    root = _fake_package(tmp_path)
    # In the file, but in another symbol: the anchor must be inside the named one.
    stale = Citation("planted_stale", "verl", "verl/workers/fake.py", "Worker.update", "len(batch) % 3 == 0")
    found = problem(stale, root)
    assert found is not None and "'planted_stale'" in found and "Worker.update" in found


def test_checker_names_a_missing_symbol_or_file(tmp_path: Path) -> None:
    root = _fake_package(tmp_path)
    gone = Citation("planted_gone", "verl", "verl/workers/fake.py", "Worker.train", "assert")
    moved = Citation("planted_moved", "verl", "verl/workers/elsewhere.py", "Worker.update", "assert")
    assert "'planted_gone'" in (problem(gone, root) or "") and "defines no Worker.train" in (problem(gone, root) or "")
    assert "'planted_moved'" in (problem(moved, root) or "") and "no file" in (problem(moved, root) or "")


def test_checker_finds_a_stale_row_of_the_real_table() -> None:
    """A real row with one character of its anchor changed is reported by its key, against the installed verl."""
    row = CITATIONS["mini_batch_split"]
    root, skip = installed(row)
    if root is None:
        pytest.skip(skip)
    stale = Citation(row.key, row.library, row.path, row.symbol, row.anchor.replace("== 0", "== 1"))
    found = problem(stale, root)
    assert found is not None and "'mini_batch_split'" in found


def test_no_line_number_is_cited() -> None:
    """A ``file.py:N`` goes stale with the next release and nothing could check it: cite by symbol (or a row)."""
    line = re.compile(r"[a-z_]+\.py:[0-9]+")
    places = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "verl_split").rglob("*.py")]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in places for m in line.finditer(p.read_text())]
    assert not found, f"line numbers cited (name the symbol instead): {found}"
