"""A seam: what verl-split patches in one verl module, declared as data, and the one patch/unpatch for all.

Each feature of ``verl_split/runtime/`` declares its seams in its ``seams.py`` (collected in
``verl_split/seam_catalogue.py``'s ``SEAMS``): the verl module whose import triggers the patch, the switch
and the feature it belongs to, the verl releases it applies to, what it needs of verl (checked by the
preflight), and what it does there, as strings that load nothing until the target is imported:

* ``wraps``: attributes wrapped with wrapt (``Wrap``), the common case;
* ``apply``: a function ``(target module, undo)`` for what is not a wrapper -- a registry entry, a
  rebound name, a copied method -- which records how to take each change back in ``undo``.

:func:`patch_seam` and :func:`unpatch_seam` are derived from those rows alone (OpenTelemetry's instrumentors and
dd-trace's ``patch()/unpatch()`` work the same way), so no feature writes its own undo.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from packaging.specifiers import SpecifierSet

from verl_split.core import compat
from verl_split.plugin import wrapping

#: The switches that register seams: ``VERL_SPLIT`` and ``VERL_SPLIT_CPU``.
SWITCHES = ("split", "cpu")


@dataclass(frozen=True)
class Wrap:
    """``attr`` of the target module (``"Class.method"`` or a module-level name) wrapped by ``wrapper``.

    ``wrapper`` names a wrapt wrapper ``(wrapped, instance, args, kwargs)`` as ``"module:function"``. With
    ``adapter`` (``"module:Class"``) it names a factory instead, called with ``Class(owner)`` -- ``owner``
    being the class that holds ``attr`` -- that returns the wrapper (the overlaps' trainer adapters).
    ``optional``: left alone where this verl has no such attribute.
    """

    attr: str
    wrapper: str
    adapter: str = ""
    optional: bool = False


@dataclass(frozen=True)
class Seam:
    """One verl module's patch for one feature; see the module docstring."""

    name: str
    target: str  # the module whose import triggers the patch
    switch: str  # "split" (VERL_SPLIT) or "cpu" (VERL_SPLIT_CPU): registers it
    feature: str  # the preflight's feature (plugin.preflight.FEATURES): switches it off, names it in errors
    verl: SpecifierSet  # the verl releases it applies to: one of core.compat's named ranges
    needs: tuple[str, ...] = ()  # what it wraps and reads in verl, in the preflight's language
    wraps: tuple[Wrap, ...] = ()
    apply: str = ""  # "module:function(target, undo)" for what is not a wrapper

    def applies_to(self, family: str | None = None) -> bool:
        """True for the installed verl, or for release family ``family`` (``"0.8"``)."""
        return compat.verl_in(self.verl) if family is None else self.verl.contains(family, prereleases=True)


def load(ref: str) -> Any:
    """``"package.module:name"`` -> the object."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _owner(target: ModuleType, attr: str) -> tuple[Any, str]:
    *path, name = attr.split(".")
    owner: Any = target
    for part in path:
        owner = getattr(owner, part)
    return owner, name


class Undo:
    """How to take back the changes one seam's ``apply`` made, in reverse order."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], None]] = []

    def call(self, step: Callable[[], None]) -> None:
        """Run ``step`` at unpatch (a change the helpers below do not cover)."""
        self._steps.append(step)

    def setattr(self, owner: Any, name: str, value: Any) -> None:
        had, before = name in vars(owner), vars(owner).get(name)
        setattr(owner, name, value)
        self.call(lambda: setattr(owner, name, before) if had else delattr(owner, name))

    def delattr(self, owner: Any, name: str) -> None:
        before = vars(owner)[name]
        delattr(owner, name)
        self.call(lambda: setattr(owner, name, before))

    def setitem(self, mapping: MutableMapping, key: Any, value: Any) -> None:
        """Add an entry; at unpatch it is removed again if it still holds ``value``."""
        mapping[key] = value
        self.call(lambda: mapping.pop(key) if mapping.get(key) is value else None)

    def setenv(self, key: str, value: str) -> None:
        """Default an environment variable; at unpatch it is removed again if it still holds ``value``."""
        os.environ[key] = value
        self.call(lambda: os.environ.pop(key) if os.environ.get(key) == value else None)

    def wrap(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
        """Wrap another module's binding of a wrapped name (``wrapping.wrap``), unwrapped at unpatch."""
        if wrapping.wrap(owner, name, wrapper):
            self.call(lambda: wrapping.unwrap(owner, name))

    def run(self) -> None:
        while self._steps:
            self._steps.pop()()


#: seam name -> the undo of what its ``apply`` did in this process.
_undo: dict[str, Undo] = {}


def patch_seam(seam: Seam, target: ModuleType) -> None:
    """Apply ``seam`` to its imported ``target``; a second call changes nothing."""
    for item in seam.wraps:
        owner, name = _owner(target, item.attr)
        if item.optional and name not in vars(owner):
            continue
        wrapper = load(item.wrapper)
        if item.adapter:
            wrapper = wrapper(load(item.adapter)(owner))
        wrapping.wrap(owner, name, wrapper)
    if seam.apply and seam.name not in _undo:
        undo = _undo[seam.name] = Undo()
        load(seam.apply)(target, undo)


def unpatch_seam(seam: Seam, target: ModuleType) -> None:
    """Take ``seam`` back: what ``apply`` did, then the wrappers, in reverse order."""
    undo = _undo.pop(seam.name, None)
    if undo is not None:
        undo.run()
    for item in reversed(seam.wraps):
        owner, name = _owner(target, item.attr)
        wrapping.unwrap(owner, name)


def wrapped_attrs(seam: Seam) -> list[str]:
    """``module:attr`` of everything ``seam`` wraps (for the preflight and the tests)."""
    return [f"{seam.target}:{item.attr}" for item in seam.wraps]
