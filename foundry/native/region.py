"""libfoundry's allocation region (csrc/region*.c), the count of other processes' memory open here
(csrc/imports.c) and the builders' heap warm-up (csrc/heap_warm.c), typed. foundry.region holds the
policy; this is only the boundary."""

from __future__ import annotations

import ctypes
import struct

from foundry.errors import RegionStateError

from ._abi import AllocEvent, RegionInfo
from .lib import check, native

__all__ = [
    "EVENT_FIELDS",
    "heap_release",
    "heap_warm",
    "imports_live",
    "interposer_loaded",
    "region_event_count",
    "region_events",
    "region_free_preallocated",
    "region_hold",
    "region_info",
    "region_map_range",
    "region_preallocate",
    "region_release",
    "region_resume",
    "region_set",
    "region_set_cursor",
    "region_stop",
]


def interposer_loaded() -> bool:
    """Whether this process's libfoundry is the preloaded interposer (the region needs it)."""
    return native().preloaded


def region_set(base: int, size: int) -> None:
    check(native().fdy_region_set(base, size), "set_allocation_region")


def region_hold(base: int, size: int) -> bool:
    """Reserves the range for a later region_set; False when it is taken."""
    return bool(native().fdy_region_hold(base, size) == 0)


def region_stop() -> None:
    check(native().fdy_region_stop(), "stop_allocation_region", RegionStateError)


def region_resume() -> None:
    check(native().fdy_region_resume(), "resume_allocation_region", RegionStateError)


def region_release() -> None:
    check(native().fdy_region_release(), "release_allocation_region")


def region_preallocate(size: int) -> None:
    check(native().fdy_region_preallocate(size), "preallocate_region")


def region_driver_room() -> int:
    """Bytes of small allocations the driver's own packing would take now without more device memory."""
    room = ctypes.c_uint64(0)
    check(native().fdy_region_driver_room(ctypes.byref(room)), "small_allocation_room")
    return int(room.value)


def region_open_pack(room: int) -> None:
    check(native().fdy_region_open_pack(room), "open_small_allocation_granule")


def region_free_preallocated() -> None:
    check(native().fdy_region_free_preallocated(), "free_preallocated_region", RegionStateError)


def region_info() -> RegionInfo:
    info = RegionInfo()
    check(native().fdy_region_info_get(ctypes.byref(info)), "region_state")
    return info


def region_set_cursor(offset: int) -> None:
    check(native().fdy_region_set_cursor(offset), "set_current_alloc_offset")


def region_map_range(offset: int, size: int) -> None:
    """Maps every part of [offset, offset + size) of the region not mapped yet (LOAD's restore)."""
    check(native().fdy_region_map_range(offset, size), "restore SAVE's memory")


def region_event_count() -> int:
    """How many entries the allocation log holds."""
    return int(native().fdy_region_events(0, None, 0))


# fdy_alloc_event's fields as one struct format, from the generated layout (its one source of truth): the log
# is unpacked in one pass over the copied entries, not one ctypes object per entry (an engine's LOAD logs tens of
# thousands of entries in a phase; 0.52 s of SGLang's start-up went to that on an H200).
_CODES: dict[object, str] = {ctypes.c_uint64: "Q", ctypes.c_uint32: "I"}
_EVENT_FORMAT = "=" + "".join(_CODES[field[1]] for field in AllocEvent._fields_)
EVENT_FIELDS = tuple(str(field[0]) for field in AllocEvent._fields_)


def region_events(first: int = 0) -> list[tuple[int, ...]]:
    """The allocation log from entry ``first`` on, in call order: each entry as a tuple of ``EVENT_FIELDS``."""
    lib = native()
    total = lib.fdy_region_events(first, None, 0)
    buf = (AllocEvent * max(total - first, 0))()
    n = min(lib.fdy_region_events(first, buf, len(buf)) - first, len(buf))
    return list(struct.iter_unpack(_EVENT_FORMAT, memoryview(buf).cast("B")[: n * ctypes.sizeof(AllocEvent)]))


def imports_live() -> int:
    """How many mappings of other processes' GPU memory are open in this one (0: none)."""
    return int(native().fdy_imports_live())


def heap_warm(size: int) -> int | None:
    """Grows the calling thread's malloc arena by about ``size`` bytes, pre-faulted; what to pass to
    heap_release, or None when there was nothing to do."""
    keep: int | None = native().fdy_heap_warm(size)
    return keep


def heap_release(keep: int) -> None:
    native().fdy_heap_release(keep)
