"""Canonical writer of graph records and deltas (docs/FORMAT.md, "Graph record", "Delta"), for tests:
Foundry itself writes records and deltas only in C (csrc/codec_*.c), from driver graphs; tests build
records from value objects here, and the round trips prove the reader against this writer.

Contract: ``encode_record(r)`` returns the one byte string that represents ``r`` (reserved fields and
padding zero), and ``parse_record(encode_record(r)) == r``. A record that the format cannot hold
(a value out of its field's range, an index out of bounds, a parameter outside the argument
buffer, ...) raises ``ValueError`` naming the node and the field; nothing is returned half-done.
"""

from __future__ import annotations

import struct

from foundry.errors import ArchiveError
from foundry.records import (
    ChildGraphNode,
    Delta,
    GraphRecord,
    KernelNode,
    MemcpyNode,
    MemsetNode,
    Node,
    delta_bytes,
    override_spans,
    parse_record,
)
from foundry.records import layout as L
from foundry.records.delta import VARYING_NODE_TYPES
from foundry.records.layout import (
    RecAttr,
    RecEdge,
    RecEvent,
    RecHeader,
    RecKernel,
    RecMemcpy,
    RecMemset,
    RecNode,
    RecParam,
)
from foundry.records.nodes import EmptyNode, EventNode

__all__ = ["encode_delta", "encode_node", "encode_record", "override_indices"]


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
            edge = RecEdge(
                from_=e.src, to=e.dst, from_port=e.from_port, to_port=e.to_port, type=e.type, reserved=bytes(5)
            )
            parts.append(edge.pack())
        except struct.error as exc:
            raise ValueError(
                f"graph record cannot be encoded: {where}edge {j}: a field is out of range for its type ({exc})"
            ) from None
    total = sum(map(len, parts)) + L.HEADER_SIZE
    try:
        parts[0] = RecHeader(
            magic=L.RECORD_MAGIC,
            version=L.RECORD_VERSION,
            header_bytes=L.HEADER_SIZE,
            node_count=len(record.nodes),
            edge_count=len(record.edges),
            function_count=record.function_count,
            event_count=record.event_count,
            total_bytes=total,
        ).pack()
    except struct.error as exc:
        raise ValueError(f"graph record cannot be encoded: {where}header: a count is out of range ({exc})") from None
    return b"".join(parts)


def encode_node(node: Node) -> bytes:
    """The canonical record of one node (as stored in a delta's overrides)."""
    return _node(node, 0, "")


def _head(node: Node, size: int) -> dict[str, int]:
    """The node header's fields (``h`` of every node record) for a record of ``size`` bytes."""
    return {"h_type": node.node_type, "h_reserved0": 0, "h_reserved1": 0, "h_bytes": size}


def _node_head(node: Node, size: int) -> bytes:
    return RecNode(type=node.node_type, reserved0=0, reserved1=0, bytes=size).pack()


def _node(node: Node, depth: int, where: str) -> bytes:
    if isinstance(node, KernelNode):
        return _kernel(node)
    if isinstance(node, MemsetNode):
        h = _head(node, L.MEMSET_SIZE)
        return RecMemset(
            **h, dst=node.dst, pitch=node.pitch, value=node.value,
            element_size=node.element_size, width=node.width, height=node.height,
        ).pack()  # fmt: skip
    if isinstance(node, MemcpyNode):
        h = _head(node, L.MEMCPY_SIZE)
        return RecMemcpy(
            **h,
            src_device=node.src_device, src_x=node.src_x_bytes, src_y=node.src_y, src_z=node.src_z,
            src_pitch=node.src_pitch, src_height=node.src_height, dst_device=node.dst_device, dst_x=node.dst_x_bytes,
            dst_y=node.dst_y, dst_z=node.dst_z, dst_pitch=node.dst_pitch, dst_height=node.dst_height,
            width=node.width_bytes, height=node.height, depth=node.depth, src_type=node.src_memory_type,
            dst_type=node.dst_memory_type,
        ).pack()  # fmt: skip
    if isinstance(node, EventNode):
        h = _head(node, L.EVENT_SIZE)
        return RecEvent(**h, event=node.event_index, reserved=0).pack()
    if isinstance(node, EmptyNode):
        return _node_head(node, L.EMPTY_SIZE)
    if isinstance(node, ChildGraphNode):
        if node.record.function_count or node.record.event_count:
            raise ValueError(
                f"graph record cannot be encoded: {where}child record has function_count "
                f"{node.record.function_count} and event_count {node.record.event_count}; "
                "child graphs use the top-level tables and must have 0"
            )
        child = _encode(node.record, depth=depth + 1, where=where)
        return _node_head(node, L.NODE_HEAD_SIZE + len(child)) + child
    raise ValueError(
        f"graph record cannot be encoded: {where.removesuffix(' > ')} is a "
        f"{type(node).__name__}, not a graph record node"
    )


def _kernel(node: KernelNode) -> bytes:
    args = bytes(node.args)
    pcount, acount, bsize = len(node.params), len(node.attrs), len(args)
    used = L.KERNEL_HEAD_SIZE + pcount * L.PARAM_SIZE + acount * L.ATTR_SIZE + bsize
    size = L.pad8(used)
    h = _head(node, size)
    grid, block = tuple(node.grid), tuple(node.block)
    if len(grid) != 3 or len(block) != 3:
        raise struct.error(f"grid {grid} and block {block} need three dimensions each")
    fixed = RecKernel(
        **h, function=node.function_index, grid=grid, block=block,
        shared_mem=node.shared_mem, arg_mode=int(node.arg_mode), reserved0=0, param_count=pcount,
        attr_count=acount, reserved1=0, arg_bytes=bsize, reserved2=0,
    )  # fmt: skip
    parts = [fixed.pack()]
    parts += [RecParam(offset=offset, size=length).pack() for offset, length in node.params]
    for aid, value in node.attrs:
        if len(value) != L.ATTR_VALUE_SIZE:
            raise struct.error(f"launch attribute {aid} value is {len(value)} bytes, must be {L.ATTR_VALUE_SIZE}")
        parts.append(RecAttr(id=aid, reserved=0, value=value).pack())
    parts.append(args)
    parts.append(bytes(size - used))
    return b"".join(parts)


def encode_delta(delta: Delta) -> bytes:
    for index, node in delta.overrides:
        if not isinstance(node, VARYING_NODE_TYPES):
            raise ValueError(f"override of node {index}: only kernel, memset and memcpy nodes vary, not {node}")
    overrides = [(index, encode_node(node)) for index, node in delta.overrides]
    return delta_bytes(delta.template_sha256, delta.function_count, overrides)


def override_indices(data: bytes | bytearray | memoryview) -> list[int]:
    """The template node indices a delta overrides, read by the Python walk (override_spans): what the
    native ``fdy_delta_indices`` must agree with."""
    return [index for index, _start, _end in override_spans(data)]
