"""The ``pointers`` check of ``foundry verify``: a graph only uses region memory that LOAD maps.

LOAD maps exactly the region's ``live`` ranges of the graph's metadata. An address inside the region
``[base, base + size)`` but outside those ranges is memory that nothing maps at LOAD (or that a later
allocation of the program takes): a kernel argument holding one is silent memory corruption. Scanned:
every 8-byte-aligned word of every kernel's arguments that could hold a pointer (parameter boundaries
from the record, see ``kernel_pointer_words``), every memset destination and memcpy source and
destination (their whole extent), and the graph's outputs, RNG state and state memory snapshot, which
must lie in live memory even outside the region. A template member is scanned as LOAD builds it: its
template's record with its overrides applied. An address equal to the end of a live range (a
one-past-the-end pointer) is accepted.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from foundry.records import KernelNode, MemcpyNode, MemsetNode, iter_nodes, kernel_pointer_words
from foundry.schema import RegionSpec

from .findings import Findings, GraphUnderCheck
from .report import Check, ProblemKind

__all__ = ["LiveMemory", "scan_graph"]


class LiveMemory:
    """The absolute address ranges a region's ``live`` list maps, adjacent ranges merged."""

    def __init__(self, region: RegionSpec) -> None:
        self.base = region.base
        self.end = region.base + region.size
        merged: list[list[int]] = []
        for offset, length in region.live:
            lo, hi = region.base + offset, region.base + offset + length
            if length == 0:
                continue
            if merged and merged[-1][1] == lo:
                merged[-1][1] = hi
            else:
                merged.append([lo, hi])
        self.starts = [lo for lo, _ in merged]
        self.ends = [hi for _, hi in merged]

    def in_region(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` overlaps the region at all."""
        return lo < self.end and hi > self.base

    def covers(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies inside one live range (``hi == lo``: the address ``lo`` is live or is
        the end of a live range)."""
        i = bisect.bisect_right(self.starts, lo) - 1
        if i < 0:
            return False
        return hi <= self.ends[i] if hi > lo else lo <= self.ends[i]


def _extent(
    device: int, x: int, y: int, z: int, pitch: int, height: int, width: int, rows: int, depth: int
) -> tuple[int, int]:
    """``[first, end)`` bytes a 3D copy touches on one side (rows and slices of ``pitch``/``height``)."""
    slice_bytes = pitch * height
    first = device + x + y * pitch + z * slice_bytes
    if width == 0 or rows == 0 or depth == 0:
        return first, first
    return first, first + (depth - 1) * slice_bytes + (rows - 1) * pitch + width


def _uses(graph: GraphUnderCheck) -> Iterator[tuple[str, tuple[tuple[str, object], ...], int, int]]:
    """(what, details, lo, hi) of every region use of the graph's nodes that the scan checks."""
    record = graph.effective
    if record is None:
        return
    for path, node in iter_nodes(record):
        where = "node " + " > ".join(map(str, path))
        if isinstance(node, KernelNode):
            table = graph.functions_at(path)
            kernel = table[node.function_index].name if node.function_index < len(table) else "?"
            for param, offset, value in kernel_pointer_words(node):
                arg = f"argument bytes {offset}..{offset + 8}" if param < 0 else f"parameter {param}"
                details = (("node", path), ("kernel", kernel), ("parameter", param), ("byte", offset))
                yield f"{where} (kernel {kernel}), {arg}", details, value, value
        elif isinstance(node, MemsetNode):
            lo, hi = _extent(node.dst, 0, 0, 0, node.pitch, 0, node.width * node.element_size, node.height, 1)
            yield f"{where} (memset destination)", (("node", path),), lo, hi
        elif isinstance(node, MemcpyNode):
            n = node
            src = _extent(n.src_device, n.src_x_bytes, n.src_y, n.src_z, n.src_pitch, n.src_height, n.width_bytes,
                          n.height, n.depth)  # fmt: skip
            dst = _extent(n.dst_device, n.dst_x_bytes, n.dst_y, n.dst_z, n.dst_pitch, n.dst_height, n.width_bytes,
                          n.height, n.depth)  # fmt: skip
            yield f"{where} (memcpy source)", (("node", path),), *src
            yield f"{where} (memcpy destination)", (("node", path),), *dst


def scan_graph(graph: GraphUnderCheck, found: Findings) -> None:
    """Reports every region address the graph uses outside the live memory of its metadata (the
    findings list the first few of a graph and count the rest)."""
    meta = graph.meta
    live = LiveMemory(meta.region)

    def violation(what: str, details: tuple[tuple[str, object], ...], lo: int, hi: int, why: str) -> None:
        span = f"address {lo:#x}" if hi <= lo else f"bytes {lo:#x}..{hi:#x}"
        offset = f" (region offset {lo - live.base:#x})" if live.base <= lo < live.end else ""
        found.add(
            Check.POINTERS,
            ProblemKind.POINTER,
            graph.json_path,
            f"{graph.label}, {what}: {span}{offset} {why}",
            (("graph", meta.name), *details, ("address", lo), ("end", max(hi, lo))),
        )

    unmapped = (
        "is in the region but not in its live memory, which is all LOAD maps: the graph would read or write "
        "memory nothing owns. The record is damaged or forged; do not load it."
    )
    for what, details, lo, hi in _uses(graph):
        if live.in_region(lo, max(hi, lo + 1)) and not live.covers(lo, hi):
            violation(what, details, lo, hi, unmapped)
    outside = "is not in the live memory LOAD maps, so LOAD cannot hand it back at this address"
    for i, out in enumerate(meta.outputs):
        if not live.covers(out.address, out.address + out.nbytes):
            violation(f"output {i}", (("output", i),), out.address, out.address + out.nbytes, outside)
    if meta.rng is not None:
        rng = meta.rng
        for name, address in (("seed", rng.seed_address), ("offset", rng.offset_address)):
            if address and not live.covers(address, address + 8):
                violation(f"RNG {name} buffer", (("rng", name),), address, address + 8, outside)
    if meta.memory is not None:
        for offset, length in meta.memory.ranges:
            lo = live.base + offset
            if not live.covers(lo, lo + length):
                violation("state memory range", (("memory_offset", offset),), lo, lo + length, outside)
