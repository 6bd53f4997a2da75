"""Deltas: a template member stored as the node records that differ from its template.

Layout (docs/FORMAT.md, "Delta"): a 64-byte header (magic ``FGD1``, u16 version, u16 header size,
u32 override count, u32 function count, u32 x2 reserved, u64 total bytes, 32-byte SHA-256 of the
template's graph record), then per override ``u32 node index, u32 reserved`` and one node record
(kernel, memset or memcpy) in the graph-record layout, whose function indices refer to the member's
own function table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

from . import layout as L
from .layout import DELTA_MAGIC, DELTA_VERSION, RecDeltaHeader, RecNode, RecOverride
from .nodes import KernelNode, MemcpyNode, MemsetNode, Node
from .parse import parse_node

__all__ = [
    "DELTA_MAGIC",
    "VARYING_NODE_TYPES",
    "Delta",
    "delta_bytes",
    "override_problem",
    "parse_delta",
]

VARYING_NODE_TYPES = (KernelNode, MemsetNode, MemcpyNode)
"""The node types a template member may override (the rest must equal the template's)."""


def override_problem(original: Node, node: Node) -> str | None:
    """Why ``node`` cannot stand in for a template's ``original`` in an exec (None when it can), worded
    to follow "replaces node N, ": an exec updates only some node types, never a node's type, and
    never a kernel's launch attributes (SAVE groups by this rule; ``foundry verify`` checks stored
    deltas against it)."""
    if isinstance(original, KernelNode) and isinstance(node, KernelNode) and original.attrs == node.attrs:
        return None  # the common case (SAVE asks this of every node a member varies), without a message
    kind = original.node_type.name.lower()
    if type(original) is not type(node):
        return (
            f"a {kind} node of the template, with a {node.node_type.name.lower()} node; an override must "
            "keep the node's type"
        )
    if not isinstance(original, VARYING_NODE_TYPES):
        return f"a {kind} node, which an exec cannot update"
    if isinstance(original, KernelNode) and isinstance(node, KernelNode) and original.attrs != node.attrs:
        return (
            "a kernel node, with launch attributes other than the template's; an exec cannot switch launch "
            "attributes, so LOAD would run the member with the template's"
        )
    return None


@dataclass(frozen=True, slots=True)
class Delta:
    """``overrides`` maps top-level node indices of the template to the member's node records."""

    template_sha256: str
    function_count: int
    overrides: tuple[tuple[int, Node], ...]


def delta_bytes(
    template_sha256: str, function_count: int, overrides: Iterable[tuple[int, bytes | memoryview]]
) -> bytes:
    """The one byte string of a delta against the template whose record has SHA-256 ``template_sha256``
    (hex), for a member with ``function_count`` functions, holding ``overrides``: (template node index,
    the member's node record bytes), in order. Nothing is checked: SAVE proves the native writer's delta
    against these bytes, which it joins from the member's own record."""
    # One join over (index, record) pairs, the records as given (memoryviews are not copied first): SAVE
    # proves every member's delta this way, some 40,000 overrides for a 67-graph decoder.
    pack, count = L.REC_OVERRIDE.pack, 0
    parts: list[bytes | memoryview] = []
    for index, record in overrides:
        parts += (pack(index, 0), record)
        count += 1
    body = b"".join(parts)
    header = RecDeltaHeader(
        magic=DELTA_MAGIC,
        version=DELTA_VERSION,
        header_bytes=L.DELTA_HEADER_SIZE,
        override_count=count,
        function_count=function_count,
        reserved0=0,
        reserved1=0,
        total_bytes=L.DELTA_HEADER_SIZE + len(body),
        template_sha256=bytes.fromhex(template_sha256),
    )
    return header.pack() + body


def _header(mv: memoryview) -> RecDeltaHeader:
    """The checked header of a delta."""
    if bytes(mv[:4]) != DELTA_MAGIC:
        raise ArchiveForeignError(f"not a Foundry delta: bytes 0-3 are {bytes(mv[:4])!r}, expected {DELTA_MAGIC!r}")
    if len(mv) < L.DELTA_HEADER_SIZE:
        raise ArchiveCorruptError(f"delta: truncated header ({len(mv)} of {L.DELTA_HEADER_SIZE} bytes)")
    h = RecDeltaHeader.unpack_from(mv)
    if h.version != DELTA_VERSION:
        raise ArchiveVersionError(f"delta version {h.version}; this Foundry reads version {DELTA_VERSION}")
    if h.header_bytes != L.DELTA_HEADER_SIZE or h.total_bytes != len(mv) or h.reserved0 or h.reserved1:
        raise ArchiveCorruptError(
            f"delta header: size {h.header_bytes}, total {h.total_bytes} of {len(mv)} bytes, "
            f"reserved {h.reserved0},{h.reserved1}"
        )
    # Checked against the bytes present before anything is sized by it: each override takes at least
    # its index and a node header.
    if h.override_count > (h.total_bytes - L.DELTA_HEADER_SIZE) // (L.OVERRIDE_SIZE + L.NODE_HEAD_SIZE):
        raise ArchiveCorruptError(
            f"delta header: {h.override_count} overrides cannot fit in a {h.total_bytes}-byte delta"
        )
    return h


def _override_at(mv: memoryview, at: int, i: int, total: int, seen: set[int]) -> int:
    """The node index of override ``i`` at byte ``at``, checked (in bounds, not repeated)."""
    if at + L.OVERRIDE_SIZE > total:
        raise ArchiveCorruptError(f"delta, byte {at}: override {i} starts past the end")
    o = RecOverride.unpack_from(mv, at)
    if o.reserved or o.node_index in seen:
        raise ArchiveCorruptError(
            f"delta, byte {at}: override {i} (node {o.node_index}) is repeated or has reserved bits"
        )
    seen.add(o.node_index)
    return o.node_index


def override_spans(data: bytes | bytearray | memoryview) -> list[tuple[int, int, int]]:
    """(template node index, start, end) of each override's node record, without parsing the
    records. Bounds are checked, and any problem raises an ``ArchiveError`` subclass."""
    mv = memoryview(data).cast("B")
    h = _header(mv)
    total = h.total_bytes
    out: list[tuple[int, int, int]] = []
    at = L.DELTA_HEADER_SIZE
    seen: set[int] = set()
    for i in range(h.override_count):
        index = _override_at(mv, at, i, total, seen)
        node_at = at + L.OVERRIDE_SIZE
        if node_at + L.NODE_HEAD_SIZE > total:
            raise ArchiveCorruptError(f"delta, byte {node_at}: override {i} has no node record")
        size = RecNode.unpack_from(mv, node_at).bytes
        if size < L.NODE_HEAD_SIZE or node_at + size > total:
            raise ArchiveCorruptError(f"delta, byte {node_at}: override {i}'s node record of {size} bytes overruns")
        out.append((index, node_at, node_at + size))
        at = node_at + size
    if at != total:
        raise ArchiveCorruptError(f"delta: {total - at} bytes after the last override")
    return out


def delta_header(data: bytes | bytearray | memoryview) -> tuple[int, str]:
    """(function count, template record SHA-256) of a delta, its header checked."""
    h = _header(memoryview(data).cast("B"))
    return h.function_count, h.template_sha256.hex()


def parse_delta(data: bytes | bytearray | memoryview) -> Delta:
    """Parses and validates a delta; any problem raises an ``ArchiveError`` subclass."""
    mv = memoryview(data).cast("B")
    h = _header(mv)
    total, fcount = h.total_bytes, h.function_count
    overrides: list[tuple[int, Node]] = []
    at = L.DELTA_HEADER_SIZE
    seen: set[int] = set()
    for i in range(h.override_count):
        index = _override_at(mv, at, i, total, seen)
        node, size = parse_node(mv, at + L.OVERRIDE_SIZE, total, fcount, f"delta override {i}: ")
        if not isinstance(node, VARYING_NODE_TYPES):
            raise ArchiveCorruptError(f"delta, byte {at}: override {i} is a {node.node_type.name} node")
        overrides.append((index, node))
        at += L.OVERRIDE_SIZE + size
    if at != total:
        raise ArchiveCorruptError(f"delta: {total - at} bytes after the last override")
    return Delta(h.template_sha256.hex(), fcount, tuple(overrides))
