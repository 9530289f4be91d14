"""The docs hold together: links resolve, the paths and modules they name exist, the README stays short.

* Every relative link in README.md, docs/*.md and the example READMEs points at a file or folder that exists,
  and its ``#anchor`` at a heading (GitHub's slug) or an ``<a id>`` of the target.
* Every path of this repository a doc names in backticks (``verl_split/...``, ``tests/...``, ``benchmarks/...``,
  ...) exists, and every dotted ``verl_split.`` name is a module, or a module's top-level name: the code moves,
  the docs follow.
* Every module docs/development.md's folder tables name is in its row's folder; each runtime feature's row names
  all of its folder's modules, and docs/advise.md's table all of advise's.
* The README is at most 300 lines, shows both commands first, and its index links every page of docs/.

What the docs say about variables, config keys and `verl-split plan`: test_examples.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.unit

README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "split_placement"
DOCS = (README, *sorted((ROOT / "docs").glob("*.md")), EXAMPLE / "README.md", EXAMPLE / "README_zh.md")
MAX_README_LINES = 300

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
#: A repository path in backticks: it starts with one of the repository's own top-level folders.
_TOP = ("verl_split", "tests", "benchmarks", "scripts", "patches", "constraints", "docs", "examples/split_placement")
_PATH = re.compile(rf"`((?:{'|'.join(_TOP)})/[^`\s]*)`")
_MODULE = re.compile(r"\bverl_split(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _id(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def _prose(doc: Path) -> str:
    """The doc without its fenced blocks: what a reader follows, not what a shell runs."""
    return _FENCE.sub("", doc.read_text())


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not `-` or `_`), spaces as `-`."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    prose = _prose(doc)
    found, seen = set(), {}
    for heading in _HEADING.findall(prose):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found | set(_ANCHOR.findall(prose))


def _links() -> list[tuple[str, str]]:
    links = []
    for doc in DOCS:
        for target in _LINK.findall(_prose(doc)):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                links.append((_id(doc), target))
    return links


@pytest.mark.parametrize(("doc", "target"), _links())
def test_links_resolve(doc, target):
    path, _, anchor = target.partition("#")
    resolved = ((ROOT / doc).parent / path).resolve() if path else ROOT / doc
    assert resolved.exists(), f"{doc}: {target} -> {resolved.relative_to(ROOT)} does not exist"
    if anchor and resolved.suffix == ".md":
        assert anchor in anchors(resolved), f"{doc}: {target}: no heading or <a id> '{anchor}' there"


def test_the_slugs_are_githubs():
    assert slug("The critic's update runs into the next step") == "the-critics-update-runs-into-the-next-step"
    assert slug("Deferred critic update (`+defer` rows)") == "deferred-critic-update-defer-rows"
    assert slug("verl's `neo` branch") == "verls-neo-branch"


def _paths() -> list[tuple[str, str]]:
    named = set()
    for doc in DOCS:
        text = doc.read_text()
        for match in _PATH.finditer(text):
            path = match.group(1).rstrip(".,:;")
            if re.search(r"[<>*{}]|X\.Y", path):  # a pattern (`runtime/<feature>/seams.py`), not a path
                continue
            if re.search(r"verl's\s+$", text[max(0, match.start() - 12) : match.start()]):  # verl's `docs/...`
                continue
            named.add((_id(doc), path))
    return sorted(named)


@pytest.mark.parametrize(("doc", "path"), _paths())
def test_named_paths_exist(doc, path):
    assert (ROOT / path).exists(), f"{doc} names `{path}`, which does not exist (moved?)"


def _top_level_names(module: Path) -> set[str]:
    names = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[cut:]
            return not rest or (len(rest) <= 2 and rest[0] in _top_level_names(module))
    return False


def _modules() -> list[tuple[str, str]]:
    return sorted({(_id(doc), name) for doc in DOCS for name in _MODULE.findall(doc.read_text())})


@pytest.mark.parametrize(("doc", "name"), _modules())
def test_named_modules_exist(doc, name):
    assert resolves(name), f"{doc} names `{name}`, which is no module of verl_split nor a name in one (moved?)"


#: docs/development.md's folder tables: (the header's first cell, the folder a row's first cell is under).
FOLDER_TABLES = {"folder": ROOT / "verl_split", "`runtime/`": ROOT / "verl_split" / "runtime"}
#: A doc that lists every module of a folder, each as a path.
MODULE_LISTS = {"docs/advise.md": ROOT / "verl_split" / "tools" / "advise"}


def _outside_parentheses(text: str) -> str:
    """The text without what its parentheses hold (a module's description may name other things in backticks)."""
    kept, depth = [], 0
    for char in text:
        depth += char == "("
        if not depth:
            kept.append(char)
        depth -= char == ")" and depth > 0
    return "".join(kept)


def folder_rows(text: str) -> list[tuple[str, Path, list[str]]]:
    """(a row's folder as written, its directory, the names its modules column gives) of each folder table."""
    rows, under, column = [], None, 0
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            under = None
        elif cells[0] in FOLDER_TABLES and "modules" in cells:
            under, column = FOLDER_TABLES[cells[0]], cells.index("modules")
        elif under is not None and cells[0].startswith("`") and len(cells) > column:
            folder = cells[0].strip("`")
            if "<" in folder:  # `runtime/<feature>/`: a pattern, the next table has its rows
                continue
            directory = ROOT / folder if folder in ("verl_split/", "tests/") else under / folder
            rows.append((folder, directory, re.findall(r"`([^`]+)`", _outside_parentheses(cells[column]))))
    return rows


def is_module_of(directory: Path, name: str) -> bool:
    """``name`` (``seams``, ``batch*``, ``advise/``) is a module, modules or a package in ``directory``."""
    if name.endswith("/"):
        return (directory / name).is_dir()
    if name.endswith("*"):
        return any(directory.glob(f"{name}.py"))
    return (directory / f"{name}.py").exists() or (directory / name / "__init__.py").exists()


def _table_modules() -> list[tuple[str, str]]:
    rows = folder_rows((ROOT / "docs" / "development.md").read_text())
    return [(directory.relative_to(ROOT).as_posix(), name) for _, directory, names in rows for name in names]


@pytest.mark.parametrize(("folder", "name"), _table_modules())
def test_the_folder_tables_name_modules_that_exist(folder, name):
    assert is_module_of(ROOT / folder, name), f"docs/development.md: `{name}` is no module of {folder}/ (moved?)"


def test_each_runtime_features_row_names_all_its_modules():
    runtime = ROOT / "verl_split" / "runtime"
    rows = [row for row in folder_rows((ROOT / "docs" / "development.md").read_text()) if row[1].parent == runtime]
    assert {directory.name for _, directory, _ in rows} == {p.parent.name for p in runtime.glob("*/seams.py")}
    missing = {
        folder: [p.stem for p in sorted(directory.glob("*.py")) if p.stem != "__init__" and p.stem not in names]
        for folder, directory, names in rows
    }
    assert not any(missing.values()), f"docs/development.md's runtime table leaves out {missing}"


@pytest.mark.parametrize("doc", sorted(MODULE_LISTS))
def test_a_modules_table_names_each_module_of_its_folder(doc):
    folder, text = MODULE_LISTS[doc], (ROOT / doc).read_text()
    named = {p for p in sorted(folder.glob("*.py")) if f"`{p.relative_to(ROOT).as_posix()}`" in text}
    missing = [p.name for p in sorted(folder.glob("*.py")) if p.stem != "__init__" and p not in named]
    assert not missing, f"{doc} names no `{folder.relative_to(ROOT)}/` module {missing}: add a row for each"


def test_the_table_checks_find_a_moved_module_and_one_left_out():
    text = (
        "| `runtime/` | what it does | modules |\n| --- | --- | --- |\n"
        "| `overlap/` | x | `deferral` (the `fit` seam), `gone` |\n"
    )
    rows = folder_rows(text)
    assert [(folder, names) for folder, _, names in rows] == [("overlap/", ["deferral", "gone"])]
    directory = rows[0][1]
    assert is_module_of(directory, "deferral") and not is_module_of(directory, "gone")
    assert is_module_of(ROOT / "verl_split" / "placement", "batch*")
    assert is_module_of(ROOT / "verl_split" / "tools", "advise/")


def test_the_readme_is_short_and_shows_both_commands_first():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    first_screen = "\n".join(lines[:15])
    assert "$ make demo" in first_screen and "$ make test" in first_screen


def test_the_readme_index_links_every_page_of_docs():
    linked = {target.partition("#")[0] for target in _LINK.findall(README.read_text())}
    missing = [_id(page) for page in sorted((ROOT / "docs").glob("*.md")) if _id(page) not in linked]
    assert not missing, f"README.md's index does not link {missing}"
