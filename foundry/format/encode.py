"""Canonical writer of the graph record (docs/FORMAT.md, "Graph record").

Contract: ``encode_record(r)`` returns the one byte string that represents ``r`` (reserved fields and
padding zero), and ``parse_record(encode_record(r)) == r``. A record that the format cannot hold
(a value out of its field's range, an index out of bounds, a parameter outside the argument
buffer, ...) raises ``ValueError`` naming the node and the field; nothing is returned half-done.
"""

from __future__ import annotations

import struct

from foundry.errors import ArchiveError

from . import layout as L
from .nodes import ChildGraphNode, EmptyNode, EventNode, GraphRecord, KernelNode, MemcpyNode, MemsetNode, Node
from .parse import parse_record

__all__ = ["encode_node", "encode_record"]


def encode_record(record: GraphRecord) -> bytes:
    """The canonical bytes of ``record`` (a top-level record; its tables size the whole tree).

    The result is checked with ``parse_record``, so whatever this returns is a record every reader
    accepts. Raises ``ValueError`` when ``record`` cannot be represented.
    """
    data = _encode(record, depth=0, where="")
    try:
        parse_record(data)
    except ArchiveError as exc:
        raise ValueError(f"graph record cannot be encoded: {exc}") from None
    return data


def _encode(record: GraphRecord, *, depth: int, where: str) -> bytes:
    if depth > L.MAX_DEPTH:
        raise ValueError(f"graph record cannot be encoded: {where}child graphs nested deeper than {L.MAX_DEPTH}")
    parts: list[bytes] = [b""]  # placeholder for the header
    for i, node in enumerate(record.nodes):
        try:
            parts.append(_node(node, depth, f"{where}node {i} > "))
        except struct.error as exc:
            raise ValueError(
                f"graph record cannot be encoded: {where}node {i} "
                f"({type(node).__name__}): a field is out of range for its type ({exc})"
            ) from None
    for j, e in enumerate(record.edges):
        try:
            parts.append(L.EDGE.pack(e.src, e.dst, e.from_port, e.to_port, e.type, b""))
        except struct.error as exc:
            raise ValueError(
                f"graph record cannot be encoded: {where}edge {j}: a field is out of range for its type ({exc})"
            ) from None
    total = sum(map(len, parts)) + L.HEADER_SIZE
    try:
        parts[0] = L.HEADER.pack(
            L.RECORD_MAGIC,
            L.RECORD_VERSION,
            L.HEADER_SIZE,
            len(record.nodes),
            len(record.edges),
            record.function_count,
            record.event_count,
            total,
        )
    except struct.error as exc:
        raise ValueError(f"graph record cannot be encoded: {where}header: a count is out of range ({exc})") from None
    return b"".join(parts)


def encode_node(node: Node) -> bytes:
    """The canonical record of one node (as stored in a delta's overrides)."""
    return _node(node, 0, "")


def _node(node: Node, depth: int, where: str) -> bytes:
    if isinstance(node, KernelNode):
        return _kernel(node)
    if isinstance(node, MemsetNode):
        return L.NODE_HEAD.pack(node.node_type, 0, 0, L.MEMSET_SIZE) + L.MEMSET.pack(
            node.dst, node.pitch, node.value, node.element_size, node.width, node.height
        )
    if isinstance(node, MemcpyNode):
        return L.NODE_HEAD.pack(node.node_type, 0, 0, L.MEMCPY_SIZE) + L.MEMCPY.pack(
            node.src_device,
            node.src_x_bytes,
            node.src_y,
            node.src_z,
            node.src_pitch,
            node.src_height,
            node.dst_device,
            node.dst_x_bytes,
            node.dst_y,
            node.dst_z,
            node.dst_pitch,
            node.dst_height,
            node.width_bytes,
            node.height,
            node.depth,
            node.src_memory_type,
            node.dst_memory_type,
        )
    if isinstance(node, EventNode):
        return L.NODE_HEAD.pack(node.kind, 0, 0, L.EVENT_SIZE) + L.EVENT.pack(node.event_index, 0)
    if isinstance(node, EmptyNode):
        return L.NODE_HEAD.pack(node.node_type, 0, 0, L.EMPTY_SIZE)
    if isinstance(node, ChildGraphNode):
        if node.record.function_count or node.record.event_count:
            raise ValueError(
                f"graph record cannot be encoded: {where}child record has function_count "
                f"{node.record.function_count} and event_count {node.record.event_count}; "
                "child graphs use the top-level tables and must have 0"
            )
        child = _encode(node.record, depth=depth + 1, where=where)
        return L.NODE_HEAD.pack(node.node_type, 0, 0, L.NODE_HEAD_SIZE + len(child)) + child
    raise ValueError(
        f"graph record cannot be encoded: {where.removesuffix(' > ')} is a "
        f"{type(node).__name__}, not a graph record node"
    )


def _kernel(node: KernelNode) -> bytes:
    args = bytes(node.args)
    pcount, acount, bsize = len(node.params), len(node.attrs), len(args)
    used = L.KERNEL_HEAD_SIZE + pcount * L.PARAM_SIZE + acount * L.ATTR_SIZE + bsize
    size = L.pad8(used)
    parts = [
        L.NODE_HEAD.pack(node.node_type, 0, 0, size),
        L.KERNEL_FIXED.pack(
            node.function_index,
            *node.grid,
            *node.block,
            node.shared_mem,
            int(node.arg_mode),
            0,
            pcount,
            acount,
            0,
            bsize,
            0,
        ),
    ]
    if pcount:
        parts.append(L.params_struct(pcount).pack(*(v for pair in node.params for v in pair)))
    for aid, value in node.attrs:
        if len(value) != L.ATTR_VALUE_SIZE:
            raise struct.error(f"launch attribute {aid} value is {len(value)} bytes, must be 64")
        parts.append(L.ATTR.pack(aid, 0, value))
    parts.append(args)
    parts.append(bytes(size - used))
    return b"".join(parts)
