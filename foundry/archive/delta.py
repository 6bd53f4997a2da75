"""Deltas: a template member stored as the node records that differ from its template.

Layout (docs/FORMAT.md, "Delta"): a 64-byte header (magic ``FGD1``, u16 version, u16 header size,
u32 override count, u32 function count, u32 x2 reserved, u64 total bytes, 32-byte SHA-256 of the
template's graph record), then per override ``u32 node index, u32 reserved`` and one node record
(kernel, memset or memcpy) in the graph-record layout, whose function indices refer to the member's
own function table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from foundry.archive.nodes import KernelNode, MemcpyNode, MemsetNode, Node
from foundry.archive.record_encode import encode_node
from foundry.archive.record_parse import parse_node
from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

__all__ = ["DELTA_MAGIC", "Delta", "encode_delta", "parse_delta"]

DELTA_MAGIC = b"FGD1"
DELTA_VERSION = 1
_HEADER = struct.Struct("<4sHHIIIIQ32s")
_OVERRIDE = struct.Struct("<II")
_VARYING = (KernelNode, MemsetNode, MemcpyNode)


@dataclass(frozen=True, slots=True)
class Delta:
    """``overrides`` maps top-level node indices of the template to the member's node records."""

    template_sha256: str
    function_count: int
    overrides: tuple[tuple[int, Node], ...]


def encode_delta(delta: Delta) -> bytes:
    body = bytearray()
    for index, node in delta.overrides:
        if not isinstance(node, _VARYING):
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


def parse_delta(data: bytes | bytearray | memoryview) -> Delta:
    """Parses and validates a delta; any problem raises an ``ArchiveError`` subclass."""
    mv = memoryview(data).cast("B")
    if bytes(mv[:4]) != DELTA_MAGIC:
        raise ArchiveForeignError(f"not a Foundry delta: bytes 0-3 are {bytes(mv[:4])!r}, expected {DELTA_MAGIC!r}")
    if len(mv) < _HEADER.size:
        raise ArchiveCorruptError(f"delta: truncated header ({len(mv)} of 64 bytes)")
    _magic, version, hsize, count, fcount, r0, r1, total, sha = _HEADER.unpack_from(mv, 0)
    if version != DELTA_VERSION:
        raise ArchiveVersionError(f"delta version {version}; this Foundry reads version {DELTA_VERSION}")
    if hsize != _HEADER.size or total != len(mv) or r0 or r1:
        raise ArchiveCorruptError(f"delta header: size {hsize}, total {total} of {len(mv)} bytes, reserved {r0},{r1}")
    overrides: list[tuple[int, Node]] = []
    at = _HEADER.size
    seen: set[int] = set()
    for i in range(count):
        if at + _OVERRIDE.size > total:
            raise ArchiveCorruptError(f"delta, byte {at}: override {i} starts past the end")
        index, reserved = _OVERRIDE.unpack_from(mv, at)
        if reserved or index in seen:
            raise ArchiveCorruptError(f"delta, byte {at}: override {i} (node {index}) is repeated or has reserved bits")
        seen.add(index)
        node, size = parse_node(mv, at + _OVERRIDE.size, total, fcount, f"delta override {i}: ")
        if not isinstance(node, _VARYING):
            raise ArchiveCorruptError(f"delta, byte {at}: override {i} is a {node.node_type.name} node")
        overrides.append((index, node))
        at += _OVERRIDE.size + size
    if at != total:
        raise ArchiveCorruptError(f"delta: {total - at} bytes after the last override")
    return Delta(sha.hex(), fcount, tuple(overrides))
