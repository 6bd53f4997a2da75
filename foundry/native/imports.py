"""Memory of other processes open in this one, as the interposer lists it (csrc/imports.c)."""

from __future__ import annotations

from dataclasses import dataclass

from ._abi import ImportMapping, ImportsSummary
from .lib import check, native

__all__ = ["ImportedMapping", "OpenImports", "open_imports"]


@dataclass(frozen=True, slots=True)
class ImportedMapping:
    """A live cuMemMap of an allocation imported from a shareable handle. ``in_region``: it lies inside a
    reservation carved from the region, so its address follows from the sequence of calls alone."""

    address: int
    size: int
    handle_type: int
    device: int
    in_region: bool


@dataclass(frozen=True, slots=True)
class OpenImports:
    """``ipc_open``: cuIpcOpenMemHandle mappings not closed; ``handles``: imports not released;
    ``untracked``: an import the interposer could not record (it never forgets one)."""

    ipc_open: int
    handles: int
    untracked: bool
    mappings: tuple[ImportedMapping, ...]


def open_imports() -> OpenImports:
    lib = native()
    summary = ImportsSummary()
    check(lib.fdy_imports_summary_get(summary), "list the memory of other processes open here")
    # Mappings may come and go between the two calls (another thread's NCCL set-up): ask until they fit.
    while True:
        cap = int(lib.fdy_imports_mappings(None, 0)) + 8
        buf = (ImportMapping * cap)()
        total = int(lib.fdy_imports_mappings(buf, cap))
        if total <= cap:
            break
    mappings = tuple(
        ImportedMapping(m.address, m.size, m.handle_type, m.device, bool(m.in_region)) for m in buf[:total]
    )
    return OpenImports(int(summary.ipc_open), int(summary.handles), bool(summary.untracked), mappings)
