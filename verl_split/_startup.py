"""Load verl-split into verl releases that have no ``verl.plugins`` entry points (0.7, 0.8).

verl 0.9 imports the ``verl.plugins`` entry points itself while ``import verl`` runs
(``verl/__init__.py``); verl 0.7 and 0.8 only import the modules named in
``VERL_USE_EXTERNAL_MODULES``, a variable users of verl-split must not have to set. So
the wheel ships ``verl_split_activate.pth``: at interpreter start-up, and only when a
variable starting with ``VERL_SPLIT`` is in the environment, it imports this module,
which puts one finder on ``sys.meta_path``. When ``verl`` is imported the finder lets
verl's own loader run ``verl/__init__.py`` and then imports ``verl_split._bootstrap``,
the very module the 0.9 entry point names, unless that ``verl/__init__.py`` loads entry
points itself (``source_patches.loads_entry_points``: verl 0.9+, or a 0.7/0.8 source build with
``patches/<version>/0001-plugin-entry-points.patch``, found by feature because a source
build keeps its release's version); then verl's loader and its policy decide. Any
``VERL_SPLIT*`` name triggers it, like the entry point, so both paths apply the same
"off" policy (``settings.read``): a typo such as ``VERL_SPLITT=1`` stops the run. Ray
starts every worker with the same interpreter, so the same happens there.

Standard library (and ``packaging``, in ``compat``, once verl is imported), no wrapt
(it would be imported into every process of the run).
Idempotent: a ``.pth`` line can run twice in a virtual environment (CPython issue
75723), but a module runs once per process, and the finder is installed once. The
bootstrap also runs at most once: whichever path imports ``verl_split._bootstrap``
first runs it, a second import is a no-op.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType


class _BootstrapAfterVerl(importlib.abc.Loader):
    """verl's own loader, followed by verl-split's bootstrap."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # verl sees its own loader (importlib.resources, inspect); this one only runs once.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        if "verl_split._bootstrap" in sys.modules:
            return  # verl's loader (0.9, or 0.7/0.8 with the loader patch) or VERL_USE_EXTERNAL_MODULES did
        from verl_split.plugin import source_patches  # standard library + packaging only

        if source_patches.loads_entry_points(module):
            return  # verl loads entry points, and its own policy (VERL_USE_EXTERNAL_PLUGINS) said no
        # Raises ActivationFailed (a SystemExit) on a bad setting or an unsupported verl:
        # `import verl` then fails with verl-split's message, as with the entry point.
        import verl_split._bootstrap  # noqa: F401


class VerlImportFinder(importlib.abc.MetaPathFinder):
    """Hand out ``verl``'s spec with :class:`_BootstrapAfterVerl`; then step aside."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname != "verl":
            return None
        uninstall()  # one shot: verl is imported once per process
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _BootstrapAfterVerl(spec.loader)
        return spec


def installed() -> bool:
    return any(isinstance(f, VerlImportFinder) for f in sys.meta_path)


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once; nothing if verl is imported already."""
    if "verl" in sys.modules or installed():
        return
    sys.meta_path.insert(0, VerlImportFinder())


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, VerlImportFinder)]


install()
