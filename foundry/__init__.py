"""Foundry: persist captured CUDA graphs with their execution context and rebuild them fast.

Public names are imported lazily so that ``import foundry.archive`` (the pure-Python archive format, with
foundry.records, images, schema and storage) never pulls in ctypes bindings, CUDA or torch; a name that needs
torch (``CUDAGraph``, ``graph``) says so where torch cannot be imported.
"""

from __future__ import annotations

import dis
import importlib
import sys
from typing import Any

from .version import __version__

# public name -> defining module (relative to this package)
_EXPORTS: dict[str, str] = {
    # the allocation region
    "set_allocation_region": ".region",
    "stop_allocation_region": ".region",
    "resume_allocation_region": ".region",
    "release_allocation_region": ".region",
    "allocation_region": ".region",
    "preallocate_region": ".region",
    "free_preallocated_region": ".region",
    "small_allocation_room": ".region",
    "open_small_allocation_granule": ".region",
    "get_current_alloc_offset": ".region",
    "set_current_alloc_offset": ".region",
    "region_state": ".region",
    "allocation_events": ".region",
    "allocation_event_count": ".region",
    "parse_size": ".sizes",
    # graphs (torch-facing)
    "CUDAGraph": ".capture",
    "graph": ".capture",
    "restored_tensor": ".capture",
    # archives
    "save_graph_manifest": ".save",
    "write_archive_document": ".save",
    "read_archive_document": ".gate",
    "read_archive_region": ".gate",
    "pack_engine_caches": ".save",
    "open_engine_caches": ".gate",
    "read_engine_cache_files": ".gate",
    "loaded_shared_objects": ".native.loaded",
    "signing_key_id": ".trust",
    "save_phases": ".save",
    "load_cuda_modules_and_libraries": ".load",
    # many processes, one GPU each
    "set_rank": ".ranks",
    "current_rank": ".ranks",
    "program_remaps": ".region",
    "PeerRegistration": ".ranks",
    "PeerRegistrations": ".ranks",
    "rewrite_peer_registrations": ".ranks",
    "store_bundle_against": ".archive",
    "startup_phases": ".load",
    # errors: every exception Foundry raises on purpose
    "ArchiveCorruptError": ".errors",
    "ArchiveError": ".errors",
    "ArchiveForeignError": ".errors",
    "ArchiveSignatureError": ".errors",
    "ArchiveVersionError": ".errors",
    "CachesRefusedError": ".errors",
    "CodecError": ".errors",
    "DeviceMismatchError": ".errors",
    "DriverError": ".errors",
    "FoundryError": ".errors",
    "IdentityMismatchError": ".errors",
    "InterposerNotLoadedError": ".errors",
    "KernelNotFoundError": ".errors",
    "LayoutMismatchError": ".errors",
    "LoadError": ".errors",
    "ModuleAddressError": ".errors",
    "PeerMemoryError": ".errors",
    "PeerMappingError": ".errors",
    "RankMismatchError": ".errors",
    "ModuleVariableError": ".errors",
    "ParamIntrospectionError": ".errors",
    "RegionBaseTakenError": ".errors",
    "RegionError": ".errors",
    "RegionFullError": ".errors",
    "RegionStateError": ".errors",
    "RegistryError": ".errors",
    "SaveError": ".errors",
    "TorchMissingError": ".errors",
    "UnsupportedNodeError": ".errors",
    "VariableConflictError": ".errors",
    "VariablesUnknownError": ".errors",
    # errors of the engine integrations the README names (importing their shared core imports no engine)
    "ArchiveMismatchError": ".integration.shared",
    "PhaseLayoutError": ".integration.shared",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'foundry' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module, __name__), name)
    except ModuleNotFoundError as exc:
        if exc.name != "torch" and not (exc.name or "").startswith("torch."):
            raise
        message = (
            f"foundry.{name} needs PyTorch, which this Python cannot import ({exc}). Install PyTorch with CUDA "
            "(2.9 or newer: pip install 'foundry-graphs[bench]' installs a tested one). Without it, the archive "
            "tools work: foundry inspect, foundry verify, foundry.archive."
        )
        if _importing_by_name():
            raise ModuleNotFoundError(message, name="torch") from exc
        from .errors import TorchMissingError

        raise TorchMissingError(message) from exc
    globals()[name] = value
    return value


def _importing_by_name() -> bool:
    """Whether the code asking for a name is ``from foundry import NAME``. Python takes an AttributeError
    there for "no such name" and puts its own words in its place ("cannot import name"), so a name that
    needs torch is refused as a ModuleNotFoundError, which keeps ours; everywhere else (``foundry.NAME``,
    ``getattr``, ``hasattr``) as ``TorchMissingError``, an AttributeError, so that ``hasattr`` says False."""
    caller = sys._getframe(2)  # 0: this function, 1: __getattr__, 2: the code that asked (Python calls in between)
    return any(i.offset == caller.f_lasti and i.opname == "IMPORT_FROM" for i in dis.get_instructions(caller.f_code))


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["__version__", *_EXPORTS]
