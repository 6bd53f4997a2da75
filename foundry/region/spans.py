"""Sets of byte ranges, as the region's modules handle them: merged, and less other ranges."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

__all__ = ["coalesce", "subtract"]


def coalesce(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, end)`` ranges, merged where they touch or overlap, as sorted (start, length) pairs."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return [(s, e - s) for s, e in out if e > s]


def subtract(start: int, end: int, holes: Sequence[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Parts of [start, end) outside the sorted, disjoint [a, b) holes."""
    at = start
    for a, b in holes:
        if b <= at or a >= end:
            continue
        if a > at:
            yield at, a
        at = max(at, b)
    if at < end:
        yield at, end
