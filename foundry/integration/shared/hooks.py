"""Patch mechanics: replace an attribute with a wrapper (once), and run a function when a module is imported.

A plugin patches its engine's worker and model-runner modules in whichever process imports them (vLLM's
engine core or worker processes, SGLang's scheduler), without importing them itself: importing an engine's
worker in its front-end process would cost seconds and do nothing. So a plugin's ``register()`` only asks
to be told when those modules load.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .engine import Engine
from .errors import PatchTargetError

__all__ = ["forget_pending", "is_wrapped", "original_of", "unwrap", "when_imported", "wrap"]

_WRAPPED = "__foundry_wrapped__"
_ORIGINAL = "__foundry_original__"


def wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]], engine: Engine) -> bool:
    """Replaces ``owner.name`` with ``make(original)``. Returns False (and changes nothing) when it is
    wrapped already, so that installing twice (engines load plugins once per process, but tests reinstall)
    never stacks wrappers. Raises PatchTargetError, naming ``engine``, when the attribute is missing."""
    original = getattr(owner, name, None)
    if original is None:
        where = getattr(owner, "__name__", type(owner).__name__)
        raise PatchTargetError(
            f"{engine.name} has no {where}.{name}, which the Foundry adapter hooks: this is not the {engine.name} it "
            f"was written for ({engine.version}). {engine.fallback()}"
        )
    if is_wrapped(original):
        return False
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, _WRAPPED, True)
    setattr(wrapper, _ORIGINAL, original)
    setattr(owner, name, wrapper)
    return True


def is_wrapped(fn: Any) -> bool:
    return bool(getattr(fn, _WRAPPED, False))


def original_of(fn: Any) -> Any:
    return getattr(fn, _ORIGINAL, fn)


def unwrap(owner: Any, name: str) -> None:
    """Puts the original back (tests)."""
    current = getattr(owner, name, None)
    if is_wrapped(current):
        setattr(owner, name, original_of(current))


class _PostImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched module it asks the other finders, and makes the loader run the
    callbacks right after the module's code has run (before the importer sees it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[str, list[Callable[[ModuleType], None]]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        with self.lock:
            if fullname not in self.pending:
                return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    self._notify_after(spec.loader, fullname)
                return spec
        return None

    def _notify_after(self, loader: Any, fullname: str) -> None:
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            with self.lock:
                callbacks = self.pending.pop(fullname, [])
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_module


_FINDER = _PostImport()


def when_imported(module_name: str, callback: Callable[[ModuleType], None]) -> None:
    """Calls ``callback(module)`` now if ``module_name`` is imported, else right after it is."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    with _FINDER.lock:
        _FINDER.pending.setdefault(module_name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def forget_pending() -> None:
    """Drops callbacks for modules not imported yet (tests)."""
    with _FINDER.lock:
        _FINDER.pending.clear()
