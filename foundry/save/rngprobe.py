"""The native part of SAVE's probe for graph-safe random numbers (foundry.capture.rng holds the torch
part): PyTorch's host side of a replay run while the graph itself does not run, and the argument words
that point at SAVE's live memory read back, to find the generator's buffers.

The graph is kept from running by dropping the launch in the interposer (``launches_dropped``), which
leaves the exec as it was. Where the interposer's cuGraphLaunch hook is not in the runtime's path, its
work nodes are switched off and on again instead (``work_disabled``): an exec so changed replays slower
for good (13-22% on an H200, docs/DESIGN.md), so its owner must replace it afterwards. Each is one
native call, not one per node or per word (csrc/hooks_graph.c, csrc/codec_probe.c)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from foundry.errors import DriverError, FoundryError
from foundry.native import codec, hook_handed_out

from .graph import Extracted

__all__ = ["Dropped", "can_drop_launches", "launches_dropped", "pointed_words", "work_disabled"]


def _as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def pointed_words(extracted: Extracted, base: int, live: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Address -> the signed 64-bit value there, of every 8-byte argument word of the graph (from each
    argument buffer's start) that points at 8 bytes of SAVE's live memory (``live``: (offset, size) from
    the region ``base``); a word the driver cannot read is left out."""
    ranges: list[tuple[int, int]] = []
    for offset, size in sorted(live):
        start, end = base + offset, base + offset + size
        if ranges and start <= ranges[-1][1]:  # touching or overlapping: one range
            ranges[-1] = (ranges[-1][0], max(end, ranges[-1][1]))
        else:
            ranges.append((start, end))
    ranges = [r for r in ranges if r[1] - r[0] >= 8]
    return {p: _as_int64(v) for p, v in codec.pointed_words(extracted.record, ranges).items()}


def can_drop_launches() -> bool:
    """Whether a launch through the CUDA runtime reaches the interposer's cuGraphLaunch hook, so that
    ``launches_dropped`` can keep a replay from running: the runtime looks its driver entry points up
    once, at its start, and the hook records being handed out."""
    return hook_handed_out("cuGraphLaunch") or hook_handed_out("cuGraphLaunch_ptsz")


@dataclass
class Dropped:
    """How many launches ``launches_dropped`` dropped, known once its block has ended."""

    count: int = 0


@contextmanager
def launches_dropped(exec_: int) -> Iterator[Dropped]:
    """Inside, this thread's launches of ``exec_`` through the CUDA runtime (PyTorch's replays) do nothing:
    PyTorch's host side of each replay still runs. The caller compares ``Dropped.count`` with the launches
    it made, since a launch that went another way ran."""
    dropped = Dropped()
    codec.drop_launches(exec_)
    try:
        yield dropped
    finally:
        dropped.count = codec.drop_launches(0)


@contextmanager
def work_disabled(graph: int, exec_: int, extracted: Extracted) -> Iterator[None]:
    """Inside, launching ``exec_`` (instantiated from ``graph``, whose record is ``extracted``) runs none of
    its kernels, copies or memsets: what PyTorch does on the host around a replay (advancing the
    generator, refilling its buffers) still happens. SAVE probes the generator this way where it cannot
    drop the launch, so that saving a graph never runs it: a replay would change the program's memory (a
    KV cache written, a counter advanced) and can run for minutes on the inputs left from capture
    (attention over stale sequence lengths). ``exec_`` replays slower afterwards: replace it."""
    try:  # switched off inside the try: a failure part-way still switches everything back on
        codec.set_work_enabled(graph, exec_, extracted.record, False)
        yield
    finally:
        try:
            codec.set_work_enabled(graph, exec_, extracted.record, True)
        except DriverError as exc:
            raise FoundryError(
                f"the graph's work could not be switched back on after SAVE probed its random numbers ({exc}); "
                "do not replay it: capture it again"
            ) from exc
