"""verl's source as the preflight reads it: modules, classes and the names they bind, from ``ast``.

Nothing of verl is imported (``preflight.py`` says why). ``Source`` finds a module's file on ``sys.path``
the way the import system would, parses it once, and resolves a name through the module's own imports
(verl re-exports a lot) and a class's bases, so a need finds what verl really runs.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Parsed files, by path and the file's size and modification time: a process that runs the preflight more than
#: once (``verl-split doctor``, the tests) parses each of verl's files once. Nothing here changes a tree.
_PARSED: dict[tuple[str, int, int], ast.Module] = {}


def _parsed(path: Path) -> ast.Module:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _PARSED:
        _PARSED[key] = ast.parse(path.read_bytes(), str(path))
    return _PARSED[key]


@dataclass(frozen=True)
class ImportBinding:
    """A module-level name bound by an import: ``module`` itself, or ``name`` from it."""

    module: str
    name: str | None = None


@dataclass
class ClassSource:
    module: str
    node: ast.ClassDef


@dataclass
class ModuleSource:
    name: str


class Source:
    """verl's modules, read as source. ``roots``: directories holding a ``verl`` package, searched in order
    (tests put a directory with one edited file first)."""

    def __init__(self, roots: Iterable[Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self._trees: dict[str, ast.Module | None] = {}
        self._bindings: dict[str, dict[str, Any]] = {}
        self._attributes: dict[int, frozenset[str]] = {}  # id(method) -> its self.x names; the trees live here

    def _self_attributes(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
        if id(node) not in self._attributes:
            self._attributes[id(node)] = _self_attributes(node)
        return self._attributes[id(node)]

    def file_of(self, module: str) -> Path | None:
        parts = module.split(".")
        # verl from its roots; a seam may also target another package verl uses (transfer_queue): sys.path.
        roots = self.roots if _is_verl(module) else [*self.roots, *(Path(p or ".") for p in sys.path)]
        for root in roots:
            for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
                if candidate.is_file():
                    return candidate
        return None

    def is_package(self, module: str) -> bool:
        path = self.file_of(module)
        return path is not None and path.name == "__init__.py"

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.file_of(module)
            self._trees[module] = None if path is None else _parsed(path)
        return self._trees[module]

    def bindings(self, module: str) -> dict[str, Any]:
        """Module-level names: definitions, assignments and imports, also inside ``if``/``try``/``with``."""
        if module in self._bindings:
            return self._bindings[module]
        found: dict[str, Any] = {}
        package = module if self.is_package(module) else module.rpartition(".")[0]

        def visit(statements: list[ast.stmt]) -> None:
            for node in statements:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found[node.name] = node
                elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    for name in assigned_names(node):
                        found.setdefault(name, node)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            found[alias.asname] = ImportBinding(alias.name)
                        else:
                            top = alias.name.split(".")[0]
                            found[top] = ImportBinding(top)
                elif isinstance(node, ast.ImportFrom):
                    source = _absolute(node.module, node.level, package)
                    for alias in node.names:
                        if alias.name != "*":
                            found[alias.asname or alias.name] = ImportBinding(source, alias.name)
                elif isinstance(node, ast.If):
                    visit(node.body)
                    visit(node.orelse)
                elif isinstance(node, ast.Try):
                    visit(node.body)
                    for handler in node.handlers:
                        visit(handler.body)
                    visit(node.orelse)
                    visit(node.finalbody)
                elif isinstance(node, ast.With):
                    visit(node.body)

        tree = self.tree(module)
        if tree is not None:
            visit(tree.body)
        self._bindings[module] = found
        return found

    def resolve(self, module: str, name: str, depth: int = 0) -> Any:
        """What ``module.name`` is: a node, a ClassSource, a ModuleSource, an ImportBinding outside verl, or None."""
        if depth > 20:
            return None
        binding = self.bindings(module).get(name)
        if binding is None:
            submodule = f"{module}.{name}"
            return ModuleSource(submodule) if self.file_of(submodule) else None
        if isinstance(binding, ast.ClassDef):
            return ClassSource(module, binding)
        if isinstance(binding, ImportBinding):
            if not _is_verl(binding.module):
                return binding  # bound, from outside verl: there is nothing more to read
            if binding.name is None:
                return ModuleSource(binding.module) if self.file_of(binding.module) else None
            return self.resolve(binding.module, binding.name, depth + 1)
        return binding

    def member(self, cls: ClassSource, name: str, depth: int = 0) -> Any:
        """``cls.name``: defined in the class body, assigned to ``self`` in a method, or inherited."""
        if depth > 20:
            return None
        for node in cls.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return ClassSource(cls.module, node) if isinstance(node, ast.ClassDef) else node
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and name in assigned_names(node):
                return node
        for node in cls.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and name in self._self_attributes(node):
                return ast.Name(id=name)  # an instance attribute: present, nothing more to read
        for base in cls.node.bases:
            parent = self.base_of(cls.module, base)
            if parent is not None:
                found = self.member(parent, name, depth + 1)
                if found is not None:
                    return found
        return None

    def base_of(self, module: str, expression: ast.expr) -> ClassSource | None:
        if isinstance(expression, ast.Name):
            found = self.resolve(module, expression.id)
        elif isinstance(expression, ast.Attribute) and isinstance(expression.value, ast.Name):
            owner = self.resolve(module, expression.value.id)
            found = self.resolve(owner.name, expression.attr) if isinstance(owner, ModuleSource) else None
        else:
            found = None
        return found if isinstance(found, ClassSource) else None


def _absolute(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    base = package.split(".")
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def _is_verl(module: str) -> bool:
    return module == "verl" or module.startswith("verl.")


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for element in target.elts for n in _target_names(element)]
    return []


def assigned_names(node: ast.stmt) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [n for t in targets for n in _target_names(t)]


def _self_attributes(node: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Names a method assigns as ``self.name = ...``."""
    names = set()
    for child in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(child, ast.Assign):
            targets = child.targets
        elif isinstance(child, (ast.AnnAssign, ast.AugAssign)):
            targets = [child.target]
        for target in targets:
            for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if (
                    isinstance(element, ast.Attribute)
                    and isinstance(element.value, ast.Name)
                    and element.value.id == "self"
                ):
                    names.add(element.attr)
    return frozenset(names)


def verl_roots() -> list[Path]:
    """The directory holding the ``verl`` package this process would import, without importing it."""
    loaded = sys.modules.get("verl")
    if loaded is not None and getattr(loaded, "__file__", None):
        return [Path(loaded.__file__).resolve().parent.parent]
    # sys.path in order, as the import system's path finder walks it. Not importlib.util.find_spec: it
    # would ask verl-split's one-shot start-up finder (verl_split/_startup.py), which then steps aside.
    for entry in sys.path:
        root = Path(entry or ".")
        if (root / "verl" / "__init__.py").is_file():
            return [root.resolve()]
    return []
