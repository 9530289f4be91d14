"""The preflight: does the installed verl have what each seam patches and reads, before Ray starts anything?

Each seam in ``activation.SEAMS`` declares ``needs``: the verl names it wraps or reads, one string each::

    [module:]Name[.attr ...][(param, param@index, ...)]

* ``module`` defaults to the seam's target module; ``a|b`` names the modules verl has kept it in, over
  its releases (the first that has it is read); ``Name`` is a module-level name (function, class,
  variable, or a name the module imports), ``.attr`` an attribute of a class (its methods, class
  variables, dataclass fields, and instance attributes its methods assign as ``self.attr = ...``,
  inherited ones included).
* ``(params)``: parameters the function (a class: its ``__init__``) must have, by name; ``name@i`` also
  pins its position among the arguments a caller passes (``self`` not counted), for a wrapper that reads
  it positionally (``get_argument(args, kwargs, i, name)``).
* A leading ``?`` makes the need optional: checked only where verl has the name (a method a newer release
  added).
* A seam's target module and every module a need names must resolve. Targets outside verl (a package verl
  uses, ``transfer_queue``) are read from ``sys.path``.

The checks read verl's *source* with ``ast``; nothing of verl is imported. Activation runs in every process
of a run and the launching process must stay fast (``verl_split/_bootstrap.py``), and importing verl's
trainer modules there would cost seconds and apply seams where they do nothing. Parsing the dozen files the
declarations name takes a fraction of a second. ``verl-split doctor`` runs the same checks.

Features are what a user switches (``FEATURES``): each seam belongs to one (``Seam.part``); a failed need
stops the run only when its feature is on, with one line naming the feature, the verl symbol, what differs
and how to switch that feature off. A seam whose feature is off and whose needs fail is not applied
(``activation``), so switching the feature off really gets the run past it.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_split import compat

logger = logging.getLogger("verl_split")

# ------------------------------------------------------------------------------------------ the features


@dataclass(frozen=True)
class Feature:
    """One thing a user switches on or off, and how."""

    key: str
    label: str
    #: Is it on, given the run's settings (``verl_split.settings.Settings``)?
    on: Callable[[Any], bool]
    #: How to switch it off, for the end of the preflight's line.
    off: str


FEATURES: dict[str, Feature] = {
    f.key: f
    for f in (
        Feature(
            "placement",
            "split placement",
            lambda s: s.enabled,
            "unset VERL_SPLIT to run stock verl",
        ),
        Feature(
            "updates",
            "overlapped updates",
            lambda s: s.enabled and "updates" in s.overlap_phases,
            "set VERL_SPLIT_OVERLAP=prep (or off) to run the updates one after the other",
        ),
        Feature(
            "prep",
            "overlapped preparation",
            lambda s: s.enabled and "prep" in s.overlap_phases,
            "set VERL_SPLIT_OVERLAP=updates (or off) to run values after old_log_prob and ref",
        ),
        Feature(
            "defer_critic",
            "deferred critic update",
            lambda s: s.enabled and "defer_critic" in s.overlap_phases,
            "leave defer_critic out of VERL_SPLIT_OVERLAP (e.g. VERL_SPLIT_OVERLAP=updates,prep)",
        ),
        Feature(
            "shared_rollout",
            "shared rollout",
            lambda s: s.enabled and s.shared_rollout,
            "unset VERL_SPLIT_SHARED_ROLLOUT (and leave split_placement.shared_rollout out, or false)",
        ),
        Feature(
            "cpu",
            "CPU dry run",
            lambda s: s.cpu,
            "unset VERL_SPLIT_CPU and run on GPUs",
        ),
    )
}


# ------------------------------------------------------------------------------------------ a need


_NEED = re.compile(r"^(?P<optional>\?)?(?:(?P<module>[\w.|]+):)?(?P<path>[\w.]+)(?:\((?P<params>[^)]*)\))?$")


@dataclass(frozen=True)
class Need:
    """One declared need, parsed: ``module:Name.attr(param, param@index)``."""

    module: str
    path: tuple[str, ...]
    params: tuple[tuple[str, int | None], ...] | None
    text: str
    optional: bool = False  # ``?``: checked only where verl has it

    @property
    def symbol(self) -> str:
        """The verl symbol as the preflight's line names it."""
        return f"{self.module.split('|')[0]}:{'.'.join(self.path)}"


def parse(text: str, default_module: str) -> Need:
    """Parse one declaration; a malformed one is a bug of ours, so ValueError."""
    match = _NEED.match(text.replace(" ", ""))
    if match is None:
        raise ValueError(f"malformed need {text!r}: expected [module:]Name[.attr](param, param@index)")
    params = None
    if match["params"] is not None:
        parsed = []
        for item in filter(None, match["params"].split(",")):
            name, _, index = item.partition("@")
            if not name.isidentifier() or (index and not index.isdigit()):
                raise ValueError(f"malformed need {text!r}: a parameter is `name` or `name@index`, got {item!r}")
            parsed.append((name, int(index) if index else None))
        params = tuple(parsed)
    path = tuple(match["path"].split("."))
    return Need(match["module"] or default_module, path, params, text, bool(match["optional"]))


# ------------------------------------------------------------------------------------------ verl's source


@dataclass(frozen=True)
class _Import:
    """A module-level name bound by an import: ``module`` itself, or ``name`` from it."""

    module: str
    name: str | None = None


@dataclass
class _Class:
    module: str
    node: ast.ClassDef


@dataclass
class _Module:
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
            self._trees[module] = None if path is None else ast.parse(path.read_bytes(), str(path))
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
                    for name in _assigned_names(node):
                        found.setdefault(name, node)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            found[alias.asname] = _Import(alias.name)
                        else:
                            top = alias.name.split(".")[0]
                            found[top] = _Import(top)
                elif isinstance(node, ast.ImportFrom):
                    source = _absolute(node.module, node.level, package)
                    for alias in node.names:
                        if alias.name != "*":
                            found[alias.asname or alias.name] = _Import(source, alias.name)
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
        """What ``module.name`` is: a node, a _Class, a _Module, an _Import outside verl, or None."""
        if depth > 20:
            return None
        binding = self.bindings(module).get(name)
        if binding is None:
            submodule = f"{module}.{name}"
            return _Module(submodule) if self.file_of(submodule) else None
        if isinstance(binding, ast.ClassDef):
            return _Class(module, binding)
        if isinstance(binding, _Import):
            if not _is_verl(binding.module):
                return binding  # bound, from outside verl: there is nothing more to read
            if binding.name is None:
                return _Module(binding.module) if self.file_of(binding.module) else None
            return self.resolve(binding.module, binding.name, depth + 1)
        return binding

    def member(self, cls: _Class, name: str, depth: int = 0) -> Any:
        """``cls.name``: defined in the class body, assigned to ``self`` in a method, or inherited."""
        if depth > 20:
            return None
        for node in cls.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return _Class(cls.module, node) if isinstance(node, ast.ClassDef) else node
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and name in _assigned_names(node):
                return node
        for node in cls.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and name in self._self_attributes(node):
                return ast.Name(id=name)  # an instance attribute: present, nothing more to read
        for base in cls.node.bases:
            parent = self._base(cls.module, base)
            if parent is not None:
                found = self.member(parent, name, depth + 1)
                if found is not None:
                    return found
        return None

    def _base(self, module: str, expression: ast.expr) -> _Class | None:
        if isinstance(expression, ast.Name):
            found = self.resolve(module, expression.id)
        elif isinstance(expression, ast.Attribute) and isinstance(expression.value, ast.Name):
            owner = self.resolve(module, expression.value.id)
            found = self.resolve(owner.name, expression.attr) if isinstance(owner, _Module) else None
        else:
            found = None
        return found if isinstance(found, _Class) else None


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


def _assigned_names(node: ast.stmt) -> list[str]:
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


# ------------------------------------------------------------------------------------------ the check


@dataclass(frozen=True)
class Problem:
    """A need the installed verl does not meet."""

    feature: str  # FEATURES key
    seam: str
    need: Need
    differs: str  # what differs, in words

    def line(self, version: str | None = None) -> str:
        """The one line a run stops with, and doctor shows."""
        feature = FEATURES[self.feature]
        on = f"verl {version}" if version else "this verl"
        return (
            f"{feature.label} needs verl's {self.need.symbol} (seam {self.seam}), but on {on} {self.differs}. "
            f"verl-split has not been adapted to this verl yet: {feature.off}, or install a tested verl "
            f"({compat.tested_text()})."
        )


def check_need(source: Source, need: Need) -> str | None:
    """What differs for ``need`` (None: it is met)."""
    modules = need.module.split("|")
    if len(modules) > 1:
        # The first module that has the name is the one verl keeps it in; none: the first one's answer.
        for module in modules:
            if source.file_of(module) is not None and source.resolve(module, need.path[0]) is not None:
                return check_need(source, dataclasses.replace(need, module=module))
        return check_need(source, dataclasses.replace(need, module=modules[0]))
    if source.file_of(need.module) is None:
        return f"module {need.module} does not exist"
    owner: Any = _Module(need.module)
    found: Any = None
    walked: list[str] = []
    for name in need.path:
        if isinstance(owner, _Module):
            found = source.resolve(owner.name, name)
        elif isinstance(owner, _Class):
            found = source.member(owner, name)
        else:
            return None  # bound to something we cannot look into (outside verl, a variable): present
        if found is None:
            if need.optional:
                return None
            where = ".".join(walked) if walked else need.module
            kind = "class" if isinstance(owner, _Class) else "module"
            return f"{kind} {where} has no {name!r}"
        walked.append(name)
        owner = found
    if need.params is None:
        return None
    return _check_params(source, found, need)


def locate(source: Source, need: Need) -> tuple[str, ast.AST] | None:
    """The module and the definition (def, class, or assignment) that meet ``need``, for tests that break it."""
    modules = need.module.split("|")
    module = next((m for m in modules if source.resolve(m, need.path[0]) is not None), modules[0])
    owner: Any = _Module(module)
    where, found = module, None
    for name in need.path:
        if isinstance(owner, _Module):
            where, found = owner.name, source.resolve(owner.name, name)
            if isinstance(found, _Class):
                where = found.module
        elif isinstance(owner, _Class):
            where = owner.module
            found = _member_with_module(source, owner, name)
            if isinstance(found, tuple):
                where, found = found
        if found is None:
            return None
        owner = found
    node = found.node if isinstance(found, _Class) else found
    return (where, node) if isinstance(node, ast.AST) and not isinstance(node, ast.Name) else None


def _member_with_module(source: Source, cls: _Class, name: str, depth: int = 0) -> Any:
    for node in cls.node.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return cls.module, node
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and name in _assigned_names(node):
            return cls.module, node
    if depth < 20:
        for base in cls.node.bases:
            parent = source._base(cls.module, base)
            if parent is not None:
                found = _member_with_module(source, parent, name, depth + 1)
                if found is not None:
                    return found
    return None


def _check_params(source: Source, found: Any, need: Need) -> str | None:
    function = found
    is_method = len(need.path) > 1
    if isinstance(found, _Class):
        function = source.member(found, "__init__")
        is_method = True
        if function is None and _is_dataclass(found.node):
            return _check_fields(found.node, need)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None  # not a def we can read (an alias, a builtin base): nothing more to check
    arguments = function.args
    positional = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    decorators = {d.id for d in function.decorator_list if isinstance(d, ast.Name)}
    if is_method and "staticmethod" not in decorators and positional:
        positional = positional[1:]  # self / cls: what a wrapt wrapper's args leave out
    names = positional + [a.arg for a in arguments.kwonlyargs]
    for name, index in need.params or ():
        if name not in names:
            takes = ", ".join(names) or "nothing"
            return f"{'.'.join(need.path)} has no parameter {name!r} (it takes: {takes})"
        if index is not None and (index >= len(positional) or positional[index] != name):
            actual = positional.index(name) if name in positional else "keyword-only"
            return f"{'.'.join(need.path)}'s parameter {name!r} is argument {actual}, not {index}"
    return None


def _is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _check_fields(node: ast.ClassDef, need: Need) -> str | None:
    """A dataclass's ``__init__`` takes its annotated fields, in order."""
    fields = [
        n.target.id
        for n in node.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and "ClassVar" not in ast.dump(n.annotation)
    ]
    for name, index in need.params or ():
        if name not in fields:
            return f"{'.'.join(need.path)} has no parameter {name!r} (it takes: {', '.join(fields) or 'nothing'})"
        if index is not None and fields.index(name) != index:
            return f"{'.'.join(need.path)}'s parameter {name!r} is argument {fields.index(name)}, not {index}"
    return None


@dataclass
class Report:
    """What the preflight found for each feature."""

    version: str | None
    problems: list[Problem] = field(default_factory=list)
    checked: dict[str, list[str]] = field(default_factory=dict)  # feature -> seams checked
    errors: list[str] = field(default_factory=list)  # needs the preflight failed to read (taken as met)
    seconds: float = 0.0

    def failed(self, feature: str) -> list[Problem]:
        return [p for p in self.problems if p.feature == feature]

    def failed_seams(self) -> set[str]:
        return {p.seam for p in self.problems}

    def checked_seams(self) -> set[str]:
        return {name for names in self.checked.values() for name in names}

    def features(self) -> dict[str, dict[str, Any]]:
        """Each feature that applies to this verl: available, and the reason when not (doctor's list)."""
        out = {}
        for key, feature in FEATURES.items():
            if key not in self.checked:
                continue
            problems = self.failed(key)
            out[key] = {
                "label": feature.label,
                "available": not problems,
                "reason": problems[0].line(self.version) if problems else "",
                "seams": self.checked[key],
            }
        return out


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


def run(seams: Iterable[Any], source: Source | None = None) -> Report:
    """Check every seam's target and needs (seams: ``activation.Seam``s that apply to this verl)."""
    import time

    started = time.perf_counter()
    source = source or Source(verl_roots())
    report = Report(compat.installed_version())
    for seam in seams:
        report.checked.setdefault(seam.part, []).append(seam.name)
        needs = [Need(seam.target, (), None, seam.target)] + [parse(t, seam.target) for t in seam.needs]
        for need in needs:
            try:
                if not need.path:
                    differs = None if source.file_of(need.module) else f"module {need.module} does not exist"
                else:
                    differs = check_need(source, need)
            except Exception as exc:  # a bug of ours, or source we cannot read: never stop a run for it
                logger.debug("verl-split: preflight could not check %s: %s: %s", need.text, type(exc).__name__, exc)
                report.errors.append(f"{seam.name}: {need.text}: {type(exc).__name__}: {exc}")
                differs = None
            if differs is not None:
                report.problems.append(Problem(seam.part, seam.name, need, differs))
                break  # the first need that fails says enough about this seam
    report.seconds = time.perf_counter() - started
    return report
