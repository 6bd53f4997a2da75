"""Running code once a module of the engine's has been imported, for this folder's recorders: an import hook that
has the path finder find the module as always, and calls back once the module has run. Nothing is imported here
but the standard library; a module imported before the hook is handed over at once. Foundry's own
``when_imported`` (foundry/integration/shared/hooks.py) does the same for the plugins, but this runs in every
process of the engine before Foundry is imported, native runs included, and must not import it."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["after_import", "wrap_after_import"]

_CALLBACKS: dict[str, list[Callable[[ModuleType], None]]] = {}


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module with callbacks it asks the path finder, and has the module's loader
    call them once the module has run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        callbacks = _CALLBACKS.get(fullname)
        if not callbacks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, run = spec.loader, spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this module's own loader instance
        return spec


_FINDER = _Finder()


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Calls ``callback(module)`` once the module ``name`` has run: now, where it has already."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _CALLBACKS.setdefault(name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def wrap_after_import(module: str, cls_name: str, method: str, make: Callable[[Any], Any]) -> None:
    """Once ``module`` has run, replaces ``cls_name.method`` with ``make(original)``, once: a wrapper already
    there (this hook run twice, a ``sitecustomize`` chained twice) is left alone. The wrapper keeps the original
    as ``__wrapped__``."""
    mark = f"_foundry_site_{method}"

    def wrap(loaded: ModuleType) -> None:
        cls = getattr(loaded, cls_name, None)
        original = cls.__dict__.get(method) if isinstance(cls, type) else None
        if original is None or getattr(original, mark, False):
            return
        wrapper = make(original)
        setattr(wrapper, mark, True)
        wrapper.__wrapped__ = original
        setattr(cls, method, wrapper)

    after_import(module, wrap)
