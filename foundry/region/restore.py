"""How LOAD puts SAVE's memory back: it checks that this process's own allocations sit where SAVE's
did, maps every live range the program has not mapped itself, and moves the cursor past SAVE's
high-water mark, so that later allocations cannot land on memory the loaded graphs use.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from foundry._state import ProcessState
from foundry.errors import LayoutMismatchError, RegionStateError
from foundry.native.region import region_map_range
from foundry.schema import RegionSpec

from .api import region_epoch, region_state, set_current_alloc_offset
from .log import ALLOCS, own_allocations
from .spans import coalesce

__all__ = ["restore_region", "restored_covers"]


@dataclass
class _Restored:
    """The region specs whose memory this process mapped, by (region epoch, spec hash), and the absolute
    ``[start, end)`` ranges they made live, merged and sorted, for the region epoch ``epoch``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    specs: set[tuple[int, int]] = field(default_factory=set)
    epoch: int = -1
    ranges: list[tuple[int, int]] = field(default_factory=list)


_STATE = ProcessState("region.restored", _Restored)


def restore_region(saved: RegionSpec) -> None:
    """Maps SAVE's live memory in this process (once per distinct region spec)."""
    key = (region_epoch(), hash((saved.base, saved.size, saved.high_water, saved.live)))
    restored = _STATE.get()
    with restored.lock:
        if key in restored.specs:
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
    if state.small_align != saved.small_align:
        raise LayoutMismatchError(
            f"SAVE placed allocations smaller than a granule {_placement(saved.small_align)}; this Foundry places "
            f"them {_placement(state.small_align)}, so this program's small allocations would not land where "
            "SAVE's did. SAVE the archive again with this Foundry."
        )
    if state.size < saved.high_water:
        raise LayoutMismatchError(
            f"the region here has {state.size} bytes; SAVE used {saved.high_water} bytes of it. Pass a size of at "
            f"least {saved.high_water} to set_allocation_region()."
        )
    _check_layout(saved)
    for offset, length in saved.live:
        region_map_range(offset, length)
    # Moved even when it is past SAVE's memory already: the move also closes the granule this process's small
    # allocations share, in which the next one could land on SAVE's memory restored beside them.
    set_current_alloc_offset(max(state.cursor, saved.high_water))
    with restored.lock:
        restored.specs.add(key)
        if restored.epoch != key[0]:
            restored.epoch, restored.ranges = key[0], []
        merged = coalesce([*restored.ranges, *((saved.base + o, saved.base + o + n) for o, n in saved.live)])
        restored.ranges = [(start, start + length) for start, length in merged]


def _placement(small_align: int) -> str:
    return f"together, {small_align} bytes apart" if small_align else "each on a granule of its own"


def restored_covers(address: int, nbytes: int) -> bool:
    """Whether ``[address, address + nbytes)`` lies inside SAVE's live memory that LOAD mapped in this process
    (in the current region): memory a buffer kept from SAVE may be viewed at, since no allocation here can be
    handed it (the cursor is past it) and the loaded graphs expect exactly what SAVE left there."""
    restored = _STATE.get()
    with restored.lock:
        if restored.epoch != region_epoch():
            return False
        ranges = restored.ranges
    i = bisect.bisect_right(ranges, (address, float("inf"))) - 1
    return nbytes > 0 and i >= 0 and ranges[i][0] <= address and address + nbytes <= ranges[i][1]


def _check_layout(saved: RegionSpec) -> None:
    """This process's allocations must not move anything a loaded graph uses.

    Each live allocation here either is one SAVE had (same offset and size), or lies outside SAVE's
    live memory; anything else means a tensor of this program sits where SAVE had other data.
    """
    saved_allocs = {offset: size for _, kind, offset, size, _ in saved.events if kind in ALLOCS}
    for offset, span, size in own_allocations():
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
