"""What SAVE records about the region, and how LOAD puts the same memory back.

SAVE records the allocation log and the ranges that were mapped ("live"). LOAD checks that this
process's own allocations sit where SAVE's did, maps every live range the program has not mapped
itself, and moves the cursor past SAVE's high-water mark, so that later allocations cannot land on
memory the loaded graphs use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .._native import check, native
from ..archive.specs import RegionSpec
from ..errors import LayoutMismatchError, RegionStateError
from .region import (
    AllocationEvent,
    AllocKind,
    allocation_events,
    region_epoch,
    region_state,
    set_current_alloc_offset,
)

__all__ = ["live_allocations", "live_ranges", "region_spec", "restore_region"]

_ADD = {AllocKind.ALLOC, AllocKind.ASYNC_ALLOC, AllocKind.VMM_MAP, AllocKind.PREALLOC, AllocKind.RESTORE}
_REMOVE = {
    AllocKind.FREE: AllocKind.ALLOC,
    AllocKind.ASYNC_FREE: AllocKind.ASYNC_ALLOC,
    AllocKind.VMM_UNMAP: AllocKind.VMM_MAP,
    AllocKind.PREALLOC_FREE: AllocKind.PREALLOC,
}
_ALLOCS = {AllocKind.ALLOC, AllocKind.ASYNC_ALLOC}


def _coalesce(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return [(s, e - s) for s, e in out if e > s]


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
    return _coalesce(_live(events).values())


def live_allocations(
    events: Sequence[AllocationEvent], skip: Callable[[int], bool] | None = None
) -> dict[int, AllocationEvent]:
    """offset -> the allocation event of each allocation still live at the end of ``events`` (those
    at the indices ``skip`` accepts left out)."""
    live: dict[int, AllocationEvent] = {}
    for index, e in enumerate(events):
        if e.kind in _ALLOCS:
            if skip is None or not skip(index):
                live[e.offset] = e
        elif e.kind in (AllocKind.FREE, AllocKind.ASYNC_FREE):
            live.pop(e.offset, None)
    return live


def live_ranges_now() -> list[tuple[int, int]]:
    """(offset, length) of the region memory mapped right now."""
    return live_ranges((int(e.kind), e.offset, e.size, e.span) for e in allocation_events())


def own_chunks() -> list[tuple[int, int]]:
    """(offset, span) of the allocations this process holds in the region."""
    return [(off, span) for off, span, _ in _own_allocations()]


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
        live=tuple(live_ranges(quads)),
        events=tuple((e.seq, int(e.kind), e.offset, e.size, e.span) for e in events),
    )


_restored: set[tuple[int, int]] = set()  # (region epoch, spec hash)


def restore_region(saved: RegionSpec) -> None:
    """Maps SAVE's live memory in this process (once per distinct region spec)."""
    key = (region_epoch(), hash((saved.base, saved.size, saved.high_water, saved.live)))
    if key in _restored:
        return
    state = region_state()
    if not state.reserved:
        raise RegionStateError(
            f"LOAD needs the allocation region SAVE used: call set_allocation_region({saved.base:#x}, "
            f"{saved.size}) (or allocation_region(...)) before loading, and allocate the model and its inputs in "
            "the same order as in the SAVE run"
        )
    if state.base != saved.base or state.granularity != saved.granularity:
        raise LayoutMismatchError(
            f"the region here starts at {state.base:#x} with granularity {state.granularity}; SAVE used "
            f"{saved.base:#x} with granularity {saved.granularity}. Use the same base address (and the same GPU model)."
        )
    if state.size < saved.high_water:
        raise LayoutMismatchError(
            f"the region here has {state.size} bytes; SAVE used {saved.high_water} bytes of it. Pass a size of at "
            f"least {saved.high_water} to set_allocation_region()."
        )
    _check_layout(saved)
    for offset, length in saved.live:
        check(native().fdy_region_map_range(offset, length), "restore SAVE's memory")
    if state.cursor < saved.high_water:
        set_current_alloc_offset(saved.high_water)
    _restored.add(key)


def _check_layout(saved: RegionSpec) -> None:
    """This process's allocations must not move anything a loaded graph uses.

    Each live allocation here either is one SAVE had (same offset and size), or lies outside SAVE's
    live memory; anything else means a tensor of this program sits where SAVE had other data.
    """
    saved_allocs = {offset: size for _, kind, offset, size, _ in saved.events if kind in _ALLOCS}
    for offset, span, size in _own_allocations():
        if saved_allocs.get(offset) == size:
            continue
        overlap = next(((s, n) for s, n in saved.live if s < offset + span and offset < s + n), None)
        if overlap is None:
            continue
        had = saved_allocs.get(offset)
        what = f"an allocation of {had} bytes" if had is not None else "no allocation starting there"
        raise LayoutMismatchError(
            f"this process allocated {size} bytes at region offset {offset:#x}, where SAVE had {what} (SAVE's memory "
            f"[{overlap[0]:#x}, {overlap[0] + overlap[1]:#x}) is live there). The program must allocate its "
            "persistent tensors (weights, caches, static inputs) in the same order and sizes as in the SAVE run, "
            "before loading graphs."
        )


def _own_allocations() -> list[tuple[int, int, int]]:
    """(offset, span, size) of this process's live allocations."""
    return [(off, e.span, e.size) for off, e in sorted(live_allocations(allocation_events()).items())]
