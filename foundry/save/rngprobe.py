"""The native part of SAVE's probe for graph-safe random numbers (foundry.capture.rng holds the torch
part): a graph's work switched off in an exec while PyTorch's host side of a replay runs, and the
argument words that point at SAVE's live memory read back, to find the generator's buffers."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from foundry.errors import DriverError, FoundryError
from foundry.format import KernelNode, iter_nodes
from foundry.native import memcpy_dtoh, set_nodes_enabled, work_nodes

from .graph import Extracted

__all__ = ["pointed_words", "work_disabled"]


def _as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _pointers(extracted: Extracted, base: int, live: Sequence[tuple[int, int]]) -> set[int]:
    """Every 8-byte-aligned argument word that points at 8 readable bytes of SAVE's live memory."""
    found: set[int] = set()
    for _, node in iter_nodes(extracted.parsed):
        if isinstance(node, KernelNode):
            args = node.args
            found.update(w for (w,) in struct.iter_unpack("<Q", args[: len(args) // 8 * 8]))
    return {p for p in found if any(base + s <= p and p + 8 <= base + s + n for s, n in live)}


def _read_words(pointers: Iterable[int]) -> dict[int, int]:
    values = {}
    for p in pointers:
        try:
            values[p] = _as_int64(int.from_bytes(memcpy_dtoh(p, 8), "little"))
        except DriverError:
            continue
    return values


def pointed_words(extracted: Extracted, base: int, live: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Address -> the signed 64-bit value there, of every aligned argument word of the graph that points
    at 8 bytes of SAVE's live memory (``live``: (offset, size) from the region ``base``); a word the
    driver cannot read is left out."""
    return _read_words(_pointers(extracted, base, live))


@contextmanager
def work_disabled(graph: int, exec_: int, extracted: Extracted) -> Iterator[None]:
    """Inside, launching ``exec_`` (instantiated from ``graph``, whose record is ``extracted``) runs none of
    its kernels, copies or memsets: what PyTorch does on the host around a replay (advancing the
    generator, refilling its buffers) still happens. SAVE probes the generator this way, so that saving a
    graph never runs it: a replay would change the program's memory (a KV cache written, a counter
    advanced) and can run for minutes on the inputs left from capture (attention over stale sequence
    lengths)."""
    nodes = work_nodes(graph)
    try:
        set_nodes_enabled(exec_, nodes, False)  # inside: a failure part-way still switches all back on
        yield
    finally:
        try:
            set_nodes_enabled(exec_, nodes, True)
        except DriverError as exc:
            raise FoundryError(
                f"the graph's work could not be switched back on after SAVE probed its random numbers ({exc}); "
                "do not replay it: capture it again"
            ) from exc
