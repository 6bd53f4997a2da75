"""State memory: what a graph reads but a LOAD program may not rebuild (docs/FORMAT.md, "State memory").

SAVE copies every live allocation made outside graph capture (weights, static inputs, warm-up tables)
when they are small enough; LOAD writes those bytes back only where this process holds nothing of its
own, so freshly initialised inputs are never overwritten.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from foundry._state import ProcessState
from foundry.native.driver import context_synchronize, memcpy_dtoh, memcpy_htod_from
from foundry.native.region import region_event_count
from foundry.schema import MemorySpec
from foundry.storage import read_memory, write_memory

from .api import REGIONS, AllocationEvent, allocation_events, region_state
from .log import KeyedCache, live_allocations, log_key
from .remapped import outside_remapped, remapped_ranges
from .spans import subtract

__all__ = ["capture_window", "in_any", "restore_snapshot", "snapshot_limit", "state_ranges", "take_snapshot"]

DEFAULT_LIMIT = 256 << 20


@contextmanager
def capture_window() -> Iterator[None]:
    """Marks the allocations made in the block as graph-pool memory (not state)."""
    start = region_event_count()
    try:
        yield
    finally:
        end = region_event_count()
        regions = REGIONS.get()
        with regions.lock:
            regions.capture_windows.append((regions.epoch, start, end))


_RANGES: ProcessState[KeyedCache[list[tuple[int, int]]]] = ProcessState("region.state_ranges", KeyedCache)


def snapshot_limit() -> int:
    return int(os.environ.get("FOUNDRY_SNAPSHOT_LIMIT", DEFAULT_LIMIT))


def state_ranges(events: Sequence[AllocationEvent], windows: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(offset, span) of live allocations made outside every capture window ([start, end) event indices),
    sorted."""
    live = live_allocations(events, in_any(windows))
    return sorted((offset, e.span) for offset, e in live.items())


def in_any(windows: Sequence[tuple[int, int]]) -> Callable[[int], bool]:
    """Whether an event index lies in one of ``windows``: merged, then searched by bisection. An engine
    captures a graph per batch size and piece (thousands of windows) and SAVE asks this of every event at
    every graph's save, so a scan of the windows per event would grow with the square of the graphs."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(w for w in windows if w[0] < w[1]):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)

    def inside(index: int) -> bool:
        at = bisect.bisect_right(starts, index) - 1
        return at >= 0 and index < ends[at]

    return inside


def take_snapshot(archive_dir: Path, base: int, limit: int | None = None) -> MemorySpec | None:
    """Copies the state memory into ``archive_dir/memory``; None when it exceeds the limit."""
    regions = REGIONS.get()
    with regions.lock:
        windows = [(start, end) for e, start, end in regions.capture_windows if e == regions.epoch]
    # An engine saves thousands of graphs with no allocation or capture between them: the same log and
    # windows (their key: the log's, and how many windows this region has had) give the same ranges.
    key = (log_key(region_state()), len(windows), remapped_ranges())
    ranges = _RANGES.get().get(key, lambda: outside_remapped(state_ranges(allocation_events(), windows)))
    total = sum(length for _, length in ranges)
    if not ranges or total > (snapshot_limit() if limit is None else limit):
        return None
    context_synchronize()
    data = b"".join(memcpy_dtoh(base + offset, length) for offset, length in ranges)
    sha = hashlib.sha256(data).hexdigest()
    write_memory(archive_dir, data, sha)
    return MemorySpec(sha, len(data), tuple(ranges))


def restore_snapshot(
    archive_dir: Path,
    spec: MemorySpec,
    base: int,
    occupied: Callable[[], list[tuple[int, int]]] | None = None,
    app_chunks: Sequence[tuple[int, int]] = (),
) -> int:
    """Writes SAVE's state bytes back; returns how many bytes were written.

    Memory this process allocated itself (``app_chunks``, offsets) is only written where
    ``occupied()`` (absolute addresses of blocks in use) says nothing lives; without ``occupied`` it
    is left alone.
    """
    data = read_memory(archive_dir, spec.sha256, spec.bytes)
    in_use = sorted((a - base, a - base + n) for a, n in (occupied() if occupied is not None else []))
    chunks = sorted((off, off + span) for off, span in app_chunks)
    written = 0
    cursor = 0
    for offset, length in spec.ranges:
        start, end = offset, offset + length
        pieces = list(subtract(start, end, chunks))  # nobody here owns these parts: restore all of them
        if occupied is not None:
            for a, b in chunks:
                lo, hi = max(a, start), min(b, end)
                if lo < hi:
                    pieces.extend(subtract(lo, hi, in_use))
        for a, b in pieces:
            memcpy_htod_from(base + a, data, cursor + (a - offset), b - a)
            written += b - a
        cursor += length
    return written
