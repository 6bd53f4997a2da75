"""Public API of the allocation region, following the seed README's names and call shapes.

The region is process-wide: allocations from every thread land in it while it is active. It covers
the device whose context is current when it is set.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from foundry._state import ProcessState
from foundry.native import AllocKind, require_interposer
from foundry.native import region as native
from foundry.sizes import parse_size

__all__ = [
    "AllocKind",
    "AllocationEvent",
    "RegionState",
    "allocation_event_count",
    "allocation_events",
    "allocation_region",
    "free_preallocated_region",
    "get_current_alloc_offset",
    "hold_allocation_region",
    "open_small_allocation_granule",
    "preallocate_region",
    "region_epoch",
    "region_state",
    "release_allocation_region",
    "resume_allocation_region",
    "set_allocation_region",
    "set_current_alloc_offset",
    "small_allocation_room",
    "stop_allocation_region",
]


class AllocationEvent(NamedTuple):
    """One entry of the region's allocation log. A named tuple: a LOAD reads tens of thousands of them in a
    phase, and one costs a third of a frozen dataclass's making."""

    seq: int
    kind: AllocKind
    offset: int
    size: int
    span: int
    tid: int


@dataclass(frozen=True)
class RegionState:
    base: int
    size: int
    cursor: int
    high_water: int
    granularity: int
    mapped_bytes: int
    prealloc_offset: int
    prealloc_size: int
    device: int
    active: bool
    reserved: bool
    small_align: int  # allocations below a granule share granules at multiples of this (foundry.h)


def ensure_cuda_context() -> None:
    """The region needs a current context. Under PyTorch, make the runtime create its primary one."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.init()
        torch.cuda.synchronize()


@dataclass
class _Regions:
    """How many regions this process set (``region_epoch``), and the allocation-log windows that
    graph captures made, as (region epoch, first event, end event): their allocations are graph-pool
    memory, not state (snapshot.py)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    epoch: int = 0
    capture_windows: list[tuple[int, int, int]] = field(default_factory=list)


REGIONS = ProcessState("region", _Regions)


def region_epoch() -> int:
    """Counts the regions set in this process. What was learned about one region (memory restored,
    capture windows in its allocation log) is keyed by it, so that a region set again after
    release_allocation_region() starts afresh."""
    return REGIONS.get().epoch


def set_allocation_region(base: int, size: int | str) -> None:
    """Reserves ``[base, base + size)`` and places every later device allocation in it."""
    require_interposer("set_allocation_region()")
    ensure_cuda_context()
    native.region_set(int(base), parse_size(size))
    regions = REGIONS.get()
    with regions.lock:
        regions.epoch += 1


def hold_allocation_region(base: int, size: int | str) -> bool:
    """Reserves the range now so that set_allocation_region(base, size) can adopt it later.

    LOAD calls it before loading kernel images (the seed README loads them before setting the region),
    because the driver may otherwise put its own reservations where the region must go. Best effort:
    False when the range is taken already; set_allocation_region then reports it clearly.
    """
    if not native.interposer_loaded():
        return False
    ensure_cuda_context()
    return native.region_hold(int(base), parse_size(size))


def stop_allocation_region() -> None:
    """Stops placing allocations in the region; memory already placed stays valid."""
    native.region_stop()


def resume_allocation_region() -> None:
    native.region_resume()


def release_allocation_region() -> None:
    """Unmaps everything the region mapped and frees its address range (all its memory is gone)."""
    native.region_release()


def preallocate_region(size: int | str) -> None:
    """Maps ``size`` bytes at the cursor now, so that allocations inside them only move the cursor."""
    native.region_preallocate(parse_size(size))


def small_allocation_room() -> int:
    """How many bytes of allocations smaller than a granule the driver would place now, on the current
    device, without taking device memory: the room left in the page its own ``cuMemAlloc`` packs them into
    (measured with a few real 4 KiB allocations, freed again; at most a granule)."""
    return native.region_driver_room()


def open_small_allocation_granule(room: int) -> None:
    """Maps the granule the region's next small allocations share now, at the cursor, leaving ``room`` bytes of
    it for them (``small_allocation_room()``'s answer), so that they cost no memory later, as natively the
    driver's partly used page takes them. An engine that sizes its KV cache from the memory grown since a
    snapshot calls it before the snapshot; ``room`` 0 opens nothing. SAVE and LOAD call it at the same point
    with the same ``room``: it moves the cursor."""
    if room < 0:
        raise ValueError(f"open_small_allocation_granule({room}): room is a number of bytes, 0 or more")
    native.region_open_pack(room)


def free_preallocated_region() -> None:
    native.region_free_preallocated()


def region_state() -> RegionState:
    info = native.region_info()
    return RegionState(
        info.base, info.size, info.cursor, info.high_water, info.granularity, info.mapped_bytes,
        info.prealloc_offset, info.prealloc_size, info.device, bool(info.active), bool(info.reserved),
        info.small_align,
    )  # fmt: skip


def get_current_alloc_offset() -> int:
    return region_state().cursor


def set_current_alloc_offset(offset: int) -> None:
    """Moves the cursor, forward or back; LOAD uses it to skip SAVE's span and to resume at SAVE's phase
    boundaries. Allocations are placed at the cursor, or just past memory still live there: never on it."""
    native.region_set_cursor(int(offset))


def allocation_event_count() -> int:
    """How many entries the region's allocation log holds: where the next entry will be."""
    return native.region_event_count()


def allocation_events(first: int = 0) -> list[AllocationEvent]:
    """The region's allocation log from entry ``first`` on, in call order."""
    kinds = _KINDS
    return [AllocationEvent(seq, kinds.get(kind) or AllocKind(kind), offset, size, span, tid)
            for seq, offset, size, span, kind, tid in native.region_events(first)]  # fmt: skip


_KINDS = {int(k): k for k in AllocKind}  # AllocKind(n) is a call through the enum's machinery; a dict is not


@contextmanager
def allocation_region(base: int, size: int | str, prealloc_size: int | str | None = None) -> Iterator[None]:
    """Sets the region for the body (optionally preallocating) and stops it afterwards.

    The memory stays mapped after the block, as tensors made inside it may outlive it.
    """
    set_allocation_region(base, size)
    try:
        if prealloc_size is not None:
            preallocate_region(prealloc_size)
        yield
    finally:
        stop_allocation_region()
