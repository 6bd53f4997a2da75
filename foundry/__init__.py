"""Foundry: persist captured CUDA graphs with their execution context and rebuild them fast.

Public names are imported lazily so that ``import foundry.archive`` (the pure-Python archive
reader) never pulls in ctypes bindings, CUDA or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> defining module (relative to this package)
_EXPORTS: dict[str, str] = {}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'foundry' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["__version__", *_EXPORTS]
