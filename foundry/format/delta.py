"""Deltas: a template member stored as the node records that differ from its template.

Layout (docs/FORMAT.md, "Delta"): a 64-byte header (magic ``FGD1``, u16 version, u16 header size,
u32 override count, u32 function count, u32 x2 reserved, u64 total bytes, 32-byte SHA-256 of the
template's graph record), then per override ``u32 node index, u32 reserved`` and one node record
(kernel, memset or memcpy) in the graph-record layout, whose function indices refer to the member's
own function table.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

from . import layout as L
from .encode import encode_node
from .layout import DELTA_MAGIC, DELTA_VERSION, NODE_HEAD
from .nodes import KernelNode, MemcpyNode, MemsetNode, Node
from .parse import parse_node

__all__ = [
    "DELTA_MAGIC",
    "VARYING_NODE_TYPES",
    "Delta",
    "encode_delta",
    "override_indices",
    "override_problem",
    "parse_delta",
]

_HEADER = L.DELTA_HEADER
_OVERRIDE = L.OVERRIDE
VARYING_NODE_TYPES = (KernelNode, MemsetNode, MemcpyNode)
"""The node types a template member may override (the rest must equal the template's)."""


def override_problem(original: Node, node: Node) -> str | None:
    """Why ``node`` cannot stand in for a template's ``original`` in an exec (None when it can), worded
    to follow "replaces node N, ": an exec updates only some node types, never a node's type, and
    never a kernel's launch attributes (SAVE groups by this rule; ``foundry verify`` checks stored
    deltas against it)."""
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


def encode_delta(delta: Delta) -> bytes:
    body = bytearray()
    for index, node in delta.overrides:
        if not isinstance(node, VARYING_NODE_TYPES):
            raise ValueError(f"override of node {index}: only kernel, memset and memcpy nodes vary, not {node}")
        body += _OVERRIDE.pack(index, 0) + encode_node(node)
    total = _HEADER.size + len(body)
    header = _HEADER.pack(
        DELTA_MAGIC,
        DELTA_VERSION,
        _HEADER.size,
        len(delta.overrides),
        delta.function_count,
        0,
        0,
        total,
        bytes.fromhex(delta.template_sha256),
    )
    return header + bytes(body)


def _header(mv: memoryview) -> tuple[int, int, int, bytes]:
    """(override count, function count, total bytes, template SHA-256) of a checked delta header."""
    if bytes(mv[:4]) != DELTA_MAGIC:
        raise ArchiveForeignError(f"not a Foundry delta: bytes 0-3 are {bytes(mv[:4])!r}, expected {DELTA_MAGIC!r}")
    if len(mv) < _HEADER.size:
        raise ArchiveCorruptError(f"delta: truncated header ({len(mv)} of 64 bytes)")
    _magic, version, hsize, count, fcount, r0, r1, total, sha = _HEADER.unpack_from(mv, 0)
    if version != DELTA_VERSION:
        raise ArchiveVersionError(f"delta version {version}; this Foundry reads version {DELTA_VERSION}")
    if hsize != _HEADER.size or total != len(mv) or r0 or r1:
        raise ArchiveCorruptError(f"delta header: size {hsize}, total {total} of {len(mv)} bytes, reserved {r0},{r1}")
    # Checked against the bytes present before anything is sized by it: each override takes at least
    # its index and a node header.
    if count > (total - _HEADER.size) // (_OVERRIDE.size + NODE_HEAD.size):
        raise ArchiveCorruptError(f"delta header: {count} overrides cannot fit in a {total}-byte delta")
    return count, fcount, total, sha


def _override_at(mv: memoryview, at: int, i: int, total: int, seen: set[int]) -> int:
    """The node index of override ``i`` at byte ``at``, checked (in bounds, not repeated)."""
    if at + _OVERRIDE.size > total:
        raise ArchiveCorruptError(f"delta, byte {at}: override {i} starts past the end")
    index, reserved = _OVERRIDE.unpack_from(mv, at)
    if reserved or index in seen:
        raise ArchiveCorruptError(f"delta, byte {at}: override {i} (node {index}) is repeated or has reserved bits")
    seen.add(index)
    return int(index)


def override_spans(data: bytes | bytearray | memoryview) -> list[tuple[int, int, int]]:
    """(template node index, start, end) of each override's node record, without parsing the
    records. Bounds are checked, and any problem raises an ``ArchiveError`` subclass."""
    mv = memoryview(data).cast("B")
    count, _fcount, total, _sha = _header(mv)
    out: list[tuple[int, int, int]] = []
    at = _HEADER.size
    seen: set[int] = set()
    for i in range(count):
        index = _override_at(mv, at, i, total, seen)
        node_at = at + _OVERRIDE.size
        if node_at + NODE_HEAD.size > total:
            raise ArchiveCorruptError(f"delta, byte {node_at}: override {i} has no node record")
        size = NODE_HEAD.unpack_from(mv, node_at)[3]
        if size < NODE_HEAD.size or node_at + size > total:
            raise ArchiveCorruptError(f"delta, byte {node_at}: override {i}'s node record of {size} bytes overruns")
        out.append((index, node_at, node_at + size))
        at = node_at + size
    if at != total:
        raise ArchiveCorruptError(f"delta: {total - at} bytes after the last override")
    return out


def delta_header(data: bytes | bytearray | memoryview) -> tuple[int, str]:
    """(function count, template record SHA-256) of a delta, its header checked."""
    _count, fcount, _total, sha = _header(memoryview(data).cast("B"))
    return fcount, sha.hex()


def override_indices(data: bytes | bytearray | memoryview) -> list[int]:
    """The template node indices a delta overrides (see override_spans)."""
    return [index for index, _start, _end in override_spans(data)]


def parse_delta(data: bytes | bytearray | memoryview) -> Delta:
    """Parses and validates a delta; any problem raises an ``ArchiveError`` subclass."""
    mv = memoryview(data).cast("B")
    count, fcount, total, sha = _header(mv)
    overrides: list[tuple[int, Node]] = []
    at = _HEADER.size
    seen: set[int] = set()
    for i in range(count):
        index = _override_at(mv, at, i, total, seen)
        node, size = parse_node(mv, at + _OVERRIDE.size, total, fcount, f"delta override {i}: ")
        if not isinstance(node, VARYING_NODE_TYPES):
            raise ArchiveCorruptError(f"delta, byte {at}: override {i} is a {node.node_type.name} node")
        overrides.append((index, node))
        at += _OVERRIDE.size + size
    if at != total:
        raise ArchiveCorruptError(f"delta: {total - at} bytes after the last override")
    return Delta(sha.hex(), fcount, tuple(overrides))
