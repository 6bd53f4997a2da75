"""The region's allocation log, and what SAVE records of it: the allocations still live and the ranges
that were mapped ("live"). LOAD compares its own allocations with these (restore.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from foundry._state import ProcessState
from foundry.errors import RegionStateError
from foundry.native.region import region_event_count
from foundry.schema import RegionSpec

from .api import AllocationEvent, AllocKind, RegionState, allocation_events, region_epoch, region_state
from .remapped import outside_remapped, remapped_ranges
from .spans import coalesce

__all__ = [
    "ALLOCS",
    "KeyedCache",
    "live_allocations",
    "live_ranges",
    "live_ranges_now",
    "log_key",
    "own_allocations",
    "own_chunks",
    "region_spec",
]

_ADD = {AllocKind.ALLOC, AllocKind.ASYNC_ALLOC, AllocKind.VMM_MAP, AllocKind.PREALLOC, AllocKind.RESTORE}
_REMOVE = {
    AllocKind.FREE: AllocKind.ALLOC,
    AllocKind.ASYNC_FREE: AllocKind.ASYNC_ALLOC,
    AllocKind.VMM_UNMAP: AllocKind.VMM_MAP,
    AllocKind.PREALLOC_FREE: AllocKind.PREALLOC,
}
ALLOCS = {AllocKind.ALLOC, AllocKind.ASYNC_ALLOC}
T = TypeVar("T")


def _live(events: Iterable[tuple[int, int, int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """(kind, offset) -> (offset, end) of everything mapped after replaying (kind, offset, size, span)."""
    live: dict[tuple[int, int], tuple[int, int]] = {}
    for kind, offset, size, span in events:
        k = AllocKind(kind)
        if k in _ADD:
            length = size if k is AllocKind.VMM_MAP else span
            live[(k, offset)] = (offset, offset + length)
        elif k in _REMOVE:
            live.pop((_REMOVE[k], offset), None)
    return live


def live_ranges(events: Iterable[tuple[int, int, int, int]]) -> list[tuple[int, int]]:
    """Sorted, coalesced (offset, length) ranges mapped at the end of a log of (kind, off, size, span)."""
    return coalesce(_live(events).values())


def live_allocations(
    events: Sequence[AllocationEvent], skip: Callable[[int], bool] | None = None
) -> dict[int, AllocationEvent]:
    """offset -> the allocation event of each allocation still live at the end of ``events`` (those
    at the indices ``skip`` accepts left out)."""
    live: dict[int, AllocationEvent] = {}
    for index, e in enumerate(events):
        if e.kind in ALLOCS:
            if skip is None or not skip(index):
                live[e.offset] = e
        elif e.kind in (AllocKind.FREE, AllocKind.ASYNC_FREE):
            live.pop(e.offset, None)
    return live


def live_ranges_now() -> list[tuple[int, int]]:
    """(offset, length) of the region memory mapped right now. Worked out again only when the log has
    changed (``log_key``), not for each of an engine's thousands of saves with no allocation between them."""

    def scan() -> list[tuple[int, int]]:
        return live_ranges((int(e.kind), e.offset, e.size, e.span) for e in allocation_events())

    return list(_LIVE.get().get(log_key(region_state()), scan))


@dataclass
class KeyedCache(Generic[T]):
    """One value worked out from the region's log, kept with the key it was worked out from (``log_key``,
    and whatever else the value depends on): an engine saves thousands of graphs with no allocation between
    them, and each save would otherwise work it out again."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    key: tuple[object, ...] | None = None
    value: T | None = None

    def get(self, key: tuple[object, ...], make: Callable[[], T]) -> T:
        """The kept value if it was made for ``key``; otherwise ``make()``, kept for ``key``."""
        with self.lock:
            if self.key == key and self.value is not None:
                return self.value
        value = make()
        with self.lock:
            self.key, self.value = key, value
        return value


_LIVE: ProcessState[KeyedCache[list[tuple[int, int]]]] = ProcessState("region.live_ranges", KeyedCache)


def own_chunks() -> list[tuple[int, int]]:
    """(offset, span) of the allocations this process holds in the region."""
    return [(off, span) for off, span, _ in own_allocations()]


def region_spec(full_log: bool = False) -> RegionSpec:
    """The region as SAVE records it.

    A graph's JSON keeps, of the allocation log, only the events of allocations still live (what
    LOAD's layout check needs); the manifest keeps the full log (``full_log``), for verification.
    """
    state = region_state()
    if not state.reserved:
        raise RegionStateError(
            "SAVE needs the allocation region: call set_allocation_region(base, size) before the model and its "
            "inputs are allocated, so that every address the graph uses is reproducible"
        )
    return _SPECS.get().get((log_key(state), full_log, remapped_ranges()), lambda: _region_spec(state, full_log))


def log_key(state: RegionState) -> tuple[object, ...]:
    """What identifies the region and its allocation log as they are now: equal keys, equal logs. A region's
    log only grows, and only set_allocation_region, which counts regions (region_epoch), starts a new one."""
    return (region_epoch(), state, region_event_count())


_SPECS: ProcessState[KeyedCache[RegionSpec]] = ProcessState("region.specs", KeyedCache)


def _region_spec(state: RegionState, full_log: bool) -> RegionSpec:
    events = allocation_events()
    quads = [(int(e.kind), e.offset, e.size, e.span) for e in events]
    if not full_log:
        live = live_allocations(events)
        events = [e for e in events if live.get(e.offset) is e]
    return RegionSpec(
        base=state.base,
        size=state.size,
        granularity=state.granularity,
        high_water=state.high_water,
        live=tuple(outside_remapped(live_ranges(quads))),  # what the program maps again itself: not LOAD's
        events=tuple((e.seq, int(e.kind), e.offset, e.size, e.span) for e in events),
        small_align=state.small_align,
    )


def own_allocations() -> list[tuple[int, int, int]]:
    """(offset, span, size) of this process's live allocations."""
    return [(off, e.span, e.size) for off, e in sorted(live_allocations(allocation_events()).items())]
