"""The docs hold together: links resolve, the paths and modules they name exist, the README stays short.

* Every relative link in README.md, docs/*.md and the example READMEs points at a file or folder that exists,
  and its ``#anchor`` at a heading (GitHub's slug) or an ``<a id>`` of the target.
* Every path of this repository a doc names in backticks (``verl_split/...``, ``tests/...``, ``benchmarks/...``,
  ...) exists, and every dotted ``verl_split.`` name is a module, or a module's top-level name: the code moves,
  the docs follow.
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


def test_the_readme_is_short_and_shows_both_commands_first():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    first_screen = "\n".join(lines[:15])
    assert "$ make demo" in first_screen and "$ make test" in first_screen


def test_the_readme_index_links_every_page_of_docs():
    linked = {target.partition("#")[0] for target in _LINK.findall(README.read_text())}
    missing = [_id(page) for page in sorted((ROOT / "docs").glob("*.md")) if _id(page) not in linked]
    assert not missing, f"README.md's index does not link {missing}"
