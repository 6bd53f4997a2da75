"""Region memory the program maps again itself after LOAD, which LOAD therefore leaves alone.

A peer's buffer opened by IPC handle lies in a reservation carved from the region, at an address the sequence of
calls decides. Where a graph takes that address as a kernel parameter, LOAD must find the buffer mapped there
again (foundry/ranks/peers.py). A custom all-reduce's registration is another case: its kernels read the peers'
addresses from a table in device memory (vLLM's and SGLang's ``rank_data``) that the host writes after capture,
and the peers' graph inputs it opens can only be exported once every rank's LOAD has mapped its own memory. The
program then opens them after LOAD, wherever they land, and writes the table itself. Declared here at SAVE, such
a range is neither recorded as a peer mapping LOAD waits for nor listed as live memory LOAD's restore maps (which
would fill it with fresh memory the size of the peer's allocation) nor copied into the state memory.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from foundry._state import ProcessState
from foundry.errors import RegionStateError

from .api import region_epoch, region_state
from .spans import coalesce, subtract

__all__ = ["outside_remapped", "program_remaps", "remapped_covers", "remapped_ranges"]


@dataclass
class _Remapped:
    """The declared ranges of the region epoch ``epoch``, as sorted, merged (offset, length) pairs."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    epoch: int = -1
    ranges: tuple[tuple[int, int], ...] = ()


_STATE = ProcessState("region.remapped", _Remapped)


def program_remaps(address: int, size: int) -> None:
    """SAVE: ``[address, address + size)``, in the region, is memory the program maps again itself after LOAD
    and whose address reaches the graphs only through device memory the program writes again then (not through
    a kernel's parameters): LOAD neither waits for it nor maps it. A graph that takes such an address as a
    parameter reads unmapped memory after LOAD (a fault, not another buffer's bytes): declare only what the
    program rebuilds."""
    state = region_state()
    if not state.reserved:
        raise RegionStateError("program_remaps() needs the allocation region: call set_allocation_region() first")
    if size <= 0 or not (state.base <= address and address + size <= state.base + state.size):
        raise RegionStateError(
            f"program_remaps({address:#x}, {size}): not a range inside the allocation region "
            f"[{state.base:#x}, {state.base + state.size:#x})"
        )
    kept = _STATE.get()
    with kept.lock:
        epoch = region_epoch()
        ranges = list(kept.ranges) if kept.epoch == epoch else []
        ranges.append((address - state.base, size))
        kept.epoch, kept.ranges = epoch, tuple(coalesce((o, o + n) for o, n in ranges))


def remapped_ranges() -> tuple[tuple[int, int], ...]:
    """The (offset, length) ranges declared with ``program_remaps`` in the current region, sorted and merged."""
    kept = _STATE.get()
    with kept.lock:
        return kept.ranges if kept.epoch == region_epoch() else ()


def remapped_covers(offset: int, size: int) -> bool:
    """Whether ``[offset, offset + size)`` lies inside one declared range (the ranges are merged)."""
    return any(o <= offset and offset + size <= o + n for o, n in remapped_ranges())


def outside_remapped(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` ((offset, length), sorted, disjoint) less the declared ones."""
    holes = [(o, o + n) for o, n in remapped_ranges()]
    if not holes:
        return list(ranges)
    return [(a, b - a) for offset, length in ranges for a, b in subtract(offset, offset + length, holes)]
