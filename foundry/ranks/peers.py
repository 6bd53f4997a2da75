"""Memory of other processes that a saved graph may read: which of it SAVE can record, and LOAD's check
that it is mapped again where SAVE had it.

A peer's buffer mapped inside a reservation carved from the region sits at an address that the sequence
of calls alone decides (csrc/region.c, fdy_region_vmm_reserve): NCCL with cuMem reserves the range for
each peer buffer it imports itself (``cuMemAddressReserve(&ptr, size, 0, 0, 0)`` in
``ncclP2pImportShareableBuffer``), so a fresh process that sets the region and then creates its
communicators in the same order maps each peer's buffer at the same address. SAVE records those
mappings; LOAD refuses to go on until every one of them is mapped again, before anything replays and
before LOAD maps SAVE's live memory (which would otherwise put fresh, empty memory where the peer's
buffer belongs). Memory opened any other way lands where the driver chooses and is refused at SAVE.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from foundry.errors import PeerMappingError, PeerMemoryError
from foundry.native.imports import ImportedMapping, open_imports
from foundry.region import remapped_covers
from foundry.schema import PeerMapping

from .identity import current_rank

__all__ = ["check_peers", "peers_for_save"]

_NEXT = (
    "Next step: use NCCL with cuMem (NCCL_CUMEM_ENABLE=1, its default where the driver supports it) and set "
    "the allocation region before the communicator is created (before init_process_group and its first "
    "collective), so that every peer buffer is mapped inside the region."
)


def peers_for_save(json_path: Path, base: int) -> tuple[PeerMapping, ...]:
    """The peer mappings a graph saved now must record (offsets from the region ``base``); raises
    ``PeerMemoryError``, naming the kind and what to do, for memory of another process that LOAD could
    not map at the same address again, or for peer memory in a process that declared no rank."""
    found = open_imports()
    if found.untracked:
        raise PeerMemoryError(
            f"{json_path}: an import of another process's GPU memory could not be recorded (the interposer ran "
            "out of host memory), so Foundry cannot tell where it is mapped; it does not save graphs in this "
            "process. Start it again with more host memory."
        )
    if found.ipc_open:
        raise PeerMemoryError(
            f"{json_path}: this process has {found.ipc_open} CUDA IPC mapping(s) of another process's GPU memory "
            "open that the driver made (cuIpcOpenMemHandle of memory outside the exporter's Foundry region: NCCL "
            "without cuMem, or a custom all-reduce whose buffers were allocated before set_allocation_region()), "
            "which a graph may read and which the driver maps at addresses of its own choosing, so LOAD could not "
            f"find them again. Foundry does not save it. {_NEXT} Allocate shared buffers after "
            "set_allocation_region() in every process (their handles are then Foundry's, mapped where LOAD finds "
            "them again), or switch custom all-reduces off."
        )
    outside = [m for m in found.mappings if not m.in_region]
    if outside:
        raise PeerMemoryError(
            f"{json_path}: this process has {len(outside)} mapping(s) of another process's GPU memory "
            f"(cuMemImportFromShareableHandle) outside the allocation region, the first {_where(outside[0])}: their "
            "reservations were made before set_allocation_region() or after stop_allocation_region() (or not "
            "carved from the region), so the driver chose their addresses and LOAD could not map them there "
            f"again. Foundry does not save it. {_NEXT}"
        )
    if found.mappings and current_rank() is None:
        raise PeerMemoryError(
            f"{json_path}: this process has {len(found.mappings)} mapping(s) of another process's GPU memory in "
            "the region (NCCL's peer buffers), so its graphs belong to one rank of a multi-process job. Call "
            "foundry.set_rank(rank, world_size) before saving, so that LOAD can refuse the archive on another rank."
        )
    # What the program maps again itself after LOAD (a custom all-reduce's registered peers, whose addresses the
    # graphs read from a table the program rewrites): not a mapping LOAD waits for (foundry/region/remapped.py).
    kept = [m for m in found.mappings if not remapped_covers(m.address - base, m.size)]
    return tuple(
        sorted((PeerMapping(m.address - base, m.size, m.handle_type, m.device) for m in kept), key=lambda p: p.offset)
    )


def _where(m: ImportedMapping) -> str:
    return f"at {m.address:#x} ({m.size} bytes, handle type {m.handle_type})"


def check_peers(saved: Sequence[PeerMapping], base: int, source: str) -> None:
    """Refuses (``PeerMappingError``) unless each of SAVE's peer mappings is mapped here again: the same
    address and size, imported with the same handle type from memory on the same device (where the driver
    said). Runs before LOAD maps SAVE's memory, so a missing one is never replaced by fresh memory."""
    if not saved:
        return
    here = {m.address: m for m in open_imports().mappings}
    for peer in saved:
        address = base + peer.offset
        m = here.get(address)
        if m is None:
            problem = "nothing of another process is mapped there"
        elif m.size != peer.size:
            problem = f"a mapping of {m.size} bytes of another process's memory is there"
        elif m.handle_type != peer.handle_type:
            problem = f"memory imported with handle type {m.handle_type} is there"
        elif -1 not in (m.device, peer.device) and m.device != peer.device:
            problem = f"memory of device {m.device} is there"
        else:
            continue
        raise PeerMappingError(
            f"{source}: SAVE's graphs read another process's GPU memory mapped at {address:#x} (region offset "
            f"{peer.offset:#x}, {peer.size} bytes, handle type {peer.handle_type}, device {peer.device}), but "
            f"{problem}. Replaying would read the wrong memory, so nothing was loaded. Next step: on every rank, "
            "set the allocation region, then create the process group and its communicators in the same order "
            "as in the SAVE run (the same first collectives), then load."
        )
