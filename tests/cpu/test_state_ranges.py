"""SAVE's state memory (foundry/region/snapshot.py): which live allocations were made outside every capture
window, with the windows searched by bisection, so that an engine's thousands of captures do not make each
save's check grow with the number of graphs."""

from __future__ import annotations

import random
from pathlib import Path

from foundry.native import AllocKind
from foundry.region.api import AllocationEvent
from foundry.region.snapshot import in_any, state_ranges
from tests.support.graphs import JsonRunner, prelude
from tests.support.steps import steps


def _naive(events: list[AllocationEvent], windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    live: dict[int, AllocationEvent] = {}
    for index, e in enumerate(events):
        if e.kind in (AllocKind.ALLOC, AllocKind.ASYNC_ALLOC):
            if not any(start <= index < end for start, end in windows):
                live[e.offset] = e
        elif e.kind in (AllocKind.FREE, AllocKind.ASYNC_FREE):
            live.pop(e.offset, None)
    return sorted((offset, e.span) for offset, e in live.items())


def _log(rng: random.Random, n: int) -> list[AllocationEvent]:
    events, live = [], []
    for seq in range(n):
        if live and rng.random() < 0.4:
            offset = live.pop(rng.randrange(len(live)))
            events.append(AllocationEvent(seq, rng.choice([AllocKind.FREE, AllocKind.ASYNC_FREE]), offset, 0, 0, 1))
        else:
            offset = rng.randrange(1 << 20) << 12
            live.append(offset)
            kind = rng.choice([AllocKind.ALLOC, AllocKind.ASYNC_ALLOC, AllocKind.VMM_MAP])
            events.append(AllocationEvent(seq, kind, offset, 4096, 4096 * rng.randint(1, 4), 1))
    return events


def test_the_windows_are_those_a_scan_would_find() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(0, 60)
        events = _log(rng, n)
        windows = []
        for _ in range(rng.randint(0, 12)):
            start = rng.randint(0, n + 2)
            windows.append((start, start + rng.randint(-2, 8)))  # empty, touching, nested and overlapping ones
        assert state_ranges(events, windows) == _naive(events, windows), (windows, n)
        inside = in_any(windows)
        for index in range(-1, n + 3):
            assert inside(index) == any(start <= index < end for start, end in windows), (windows, index)


def test_thousands_of_windows_take_no_longer_than_a_few() -> None:
    """8,000 graphs' windows over 20,000 events: a scan per event would be some 100 million comparisons. Counted
    in steps (tests/support/steps.py), not timed: bisection takes a few per event and window."""
    rng = random.Random(3)
    events = _log(rng, 20_000)
    windows = [(i * 2, i * 2 + 1) for i in range(8_000)]
    few = steps(state_ranges, events[:2_000], windows[:800], budget=10**6)
    many = steps(state_ranges, events, windows, budget=30 * few)
    assert many < 15 * few, (few, many)  # ten times the events and windows: ten times the steps, give or take
    assert state_ranges(events[:2_000], windows[:400]) == _naive(events[:2_000], windows[:400])


# On the fake driver: the region spec, the live ranges and the state ranges are worked out again exactly when
# the log or the capture windows changed (an engine's thousands of saves with nothing between them reuse them).
REUSED = """
from foundry.region import capture_window, live_ranges_now, region_spec
from foundry.region.log import live_ranges
from foundry.region.api import allocation_events
from foundry.region.snapshot import take_snapshot
import foundry.region.log as log
import foundry.region.snapshot as snap
foundry.set_allocation_region(BASE, "1GB")
a = buf("a", 4096)
first, again = region_spec(), region_spec()
reads = []
read_log = log.allocation_events
log.allocation_events = lambda *a: reads.append(1) or read_log(*a)
live_a = live_ranges_now()
live_a_again = live_ranges_now()
live_a_again.append((0, 1))  # a copy: the cached ranges stay as they were
reads_a = len(reads)
b = buf("b", 8192)
live_b = live_ranges_now()
reads_b = len(reads)
log.allocation_events = read_log
after_alloc = region_spec()
scan_b = live_ranges((int(e.kind), e.offset, e.size, e.span) for e in allocation_events())
with capture_window():
    c = buf("c", 4096)
spec_c = take_snapshot(Path(ARCH), BASE)
call("cuMemFree_v2", c)
spec_freed = take_snapshot(Path(ARCH), BASE)
emit(
    reused=first is again,
    live_reused=live_a_again[:-1] == live_a and live_ranges_now() == scan_b and (reads_a, reads_b) == (1, 2),
    live_grew=live_b == scan_b and live_b != live_a,
    grew=len(after_alloc.events) == len(first.events) + 1 and after_alloc is not first,
    a=a - BASE, b=b - BASE, c=c - BASE,
    state_c=[list(r) for r in spec_c.ranges],
    state_freed=[list(r) for r in spec_freed.ranges],
)
"""


def test_the_region_spec_live_and_state_ranges_are_reused_until_the_log_changes(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    out = app_json(prelude(tmp_path) + "from pathlib import Path\n" + REUSED)
    assert out["reused"] and out["grew"]
    assert out["live_reused"] and out["live_grew"]  # live ranges: kept until an allocation, then the scan's
    state = {offset for offset, _ in out["state_c"]}
    assert {out["a"], out["b"]} <= state and out["c"] not in state  # made inside a capture window: graph memory
    assert out["state_freed"] == out["state_c"]
