"""The allocation region: its public API (``api``), the allocation log and what SAVE records of it
(``log``), how LOAD puts SAVE's memory back (``restore``), and the program's state memory
(``snapshot``)."""

from __future__ import annotations

from .api import (
    AllocationEvent,
    AllocKind,
    RegionState,
    allocation_event_count,
    allocation_events,
    allocation_region,
    ensure_cuda_context,
    free_preallocated_region,
    get_current_alloc_offset,
    hold_allocation_region,
    open_small_allocation_granule,
    preallocate_region,
    region_epoch,
    region_state,
    release_allocation_region,
    resume_allocation_region,
    set_allocation_region,
    set_current_alloc_offset,
    small_allocation_room,
    stop_allocation_region,
)
from .log import live_allocations, live_ranges, live_ranges_now, own_chunks, region_spec
from .remapped import program_remaps, remapped_covers, remapped_ranges
from .restore import restore_region, restored_covers
from .snapshot import capture_window, restore_snapshot, take_snapshot

__all__ = [
    "AllocKind",
    "AllocationEvent",
    "RegionState",
    "allocation_event_count",
    "allocation_events",
    "allocation_region",
    "capture_window",
    "ensure_cuda_context",
    "free_preallocated_region",
    "get_current_alloc_offset",
    "hold_allocation_region",
    "live_allocations",
    "live_ranges",
    "live_ranges_now",
    "open_small_allocation_granule",
    "own_chunks",
    "preallocate_region",
    "program_remaps",
    "region_epoch",
    "region_spec",
    "region_state",
    "release_allocation_region",
    "remapped_covers",
    "remapped_ranges",
    "restore_region",
    "restore_snapshot",
    "restored_covers",
    "resume_allocation_region",
    "set_allocation_region",
    "set_current_alloc_offset",
    "small_allocation_room",
    "stop_allocation_region",
    "take_snapshot",
]
