"""Foundry: persist captured CUDA graphs with their execution context and rebuild them fast.

Public names are imported lazily so that ``import foundry.archive`` (the pure-Python archive
reader) never pulls in ctypes bindings, CUDA or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> defining module (relative to this package)
_EXPORTS: dict[str, str] = {
    # the allocation region
    "set_allocation_region": ".memory.region",
    "stop_allocation_region": ".memory.region",
    "resume_allocation_region": ".memory.region",
    "release_allocation_region": ".memory.region",
    "allocation_region": ".memory.region",
    "preallocate_region": ".memory.region",
    "free_preallocated_region": ".memory.region",
    "get_current_alloc_offset": ".memory.region",
    "set_current_alloc_offset": ".memory.region",
    "region_state": ".memory.region",
    "allocation_events": ".memory.region",
    "parse_size": ".memory.sizes",
    # graphs (torch-facing)
    "CUDAGraph": ".capture.cudagraph",
    "graph": ".capture.cudagraph",
    # archives
    "save_graph_manifest": ".graphs.archive_ops",
    "load_cuda_modules_and_libraries": ".graphs.archive_ops",
    # errors
    "FoundryError": ".errors",
    "ArchiveError": ".errors",
    "InterposerNotLoadedError": ".errors",
}


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
