"""A preflight need: one verl name a seam wraps or reads, parsed from its declaration, and checked.

The declaration's language is ``preflight.py``'s docstring; ``check_need`` answers, from verl's source
(``verl_source.py``), what differs from it, or None when verl has it.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from verl_split.plugin.verl_source import ClassSource, ModuleSource, Source, assigned_names

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
    owner: Any = ModuleSource(need.module)
    found: Any = None
    walked: list[str] = []
    for name in need.path:
        if isinstance(owner, ModuleSource):
            found = source.resolve(owner.name, name)
        elif isinstance(owner, ClassSource):
            found = source.member(owner, name)
        else:
            return None  # bound to something we cannot look into (outside verl, a variable): present
        if found is None:
            if need.optional:
                return None
            where = ".".join(walked) if walked else need.module
            kind = "class" if isinstance(owner, ClassSource) else "module"
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
    owner: Any = ModuleSource(module)
    where, found = module, None
    for name in need.path:
        if isinstance(owner, ModuleSource):
            where, found = owner.name, source.resolve(owner.name, name)
            if isinstance(found, ClassSource):
                where = found.module
        elif isinstance(owner, ClassSource):
            where = owner.module
            found = _member_with_module(source, owner, name)
            if isinstance(found, tuple):
                where, found = found
        if found is None:
            return None
        owner = found
    node = found.node if isinstance(found, ClassSource) else found
    return (where, node) if isinstance(node, ast.AST) and not isinstance(node, ast.Name) else None


def _member_with_module(source: Source, cls: ClassSource, name: str, depth: int = 0) -> Any:
    for node in cls.node.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return cls.module, node
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and name in assigned_names(node):
            return cls.module, node
    if depth < 20:
        for base in cls.node.bases:
            parent = source.base_of(cls.module, base)
            if parent is not None:
                found = _member_with_module(source, parent, name, depth + 1)
                if found is not None:
                    return found
    return None


def _check_params(source: Source, found: Any, need: Need) -> str | None:
    function = found
    is_method = len(need.path) > 1
    if isinstance(found, ClassSource):
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
