"""Random graph records for the native scan's and comparison's tests: valid records with every persisted
node type, child graphs, repeated and unusual launch attributes and edge data (``random_graph``), and damaged
copies of them (``mutations``)."""

from __future__ import annotations

import dataclasses
import random
import struct

from foundry.records import ArgMode, ChildGraphNode, GraphRecord, KernelNode, MemcpyNode, MemsetNode, Node, NodeType
from foundry.records import layout as L
from foundry.records.layout import RecHeader, RecNode
from foundry.records.nodes import Edge, EmptyNode, EventNode, LaunchAttr
from tests.support.encode import encode_record

__all__ = ["mutations", "random_attr", "random_graph", "random_kernel"]


def random_attr(rng: random.Random) -> tuple[int, bytes]:
    aid = rng.choice((LaunchAttr.COOPERATIVE, LaunchAttr.CLUSTER_DIMENSION, LaunchAttr.PRIORITY, 77))
    words = [rng.choice((0, 1, 2, 0xFFFFFFFF)) for _ in range(3)]
    return aid, struct.pack("<3I", *words) + (rng.randbytes(52) if rng.random() < 0.3 else bytes(52))


def random_kernel(rng: random.Random, functions: int) -> KernelNode:
    args = rng.randbytes(rng.choice((0, 4, 8, 13, 24, 40)))
    mode = rng.choice((ArgMode.PARAMS, ArgMode.PARAMS, ArgMode.EXTRA))
    params: list[tuple[int, int]] = []
    if mode == ArgMode.PARAMS:
        for _ in range(rng.randrange(5)):
            offset = rng.randint(0, len(args))
            params.append((offset, rng.randint(0, len(args) - offset)))
    attrs = tuple(random_attr(rng) for _ in range(rng.choice((0, 0, 0, 1, 2, 3))))
    grid, block = ((rng.choice((1, 2, 64)), rng.choice((1, 0xFFFFFFFF)), 1) for _ in range(2))
    return KernelNode(rng.randrange(functions), grid, block, rng.choice((0, 1024)), mode, tuple(params), attrs, args)


def _node(rng: random.Random, functions: int, events: int, depth: int) -> Node:
    roll = rng.random()
    if roll < 0.4:
        return random_kernel(rng, functions)
    if roll < 0.5:
        return MemsetNode(rng.getrandbits(64), rng.getrandbits(8), rng.getrandbits(32), rng.choice((1, 2, 4)), 64, 1)
    if roll < 0.6:
        return MemcpyNode(*(rng.getrandbits(64) for _ in range(15)), 2, rng.choice((1, 2)))
    if roll < 0.72 and events:
        return EventNode(rng.choice((NodeType.WAIT_EVENT, NodeType.EVENT_RECORD)), rng.randrange(events))
    if roll < 0.9 or depth >= 3:
        return EmptyNode()
    return ChildGraphNode(_graph(rng, functions, events, depth + 1))


def _graph(rng: random.Random, functions: int, events: int, depth: int) -> GraphRecord:
    nodes = tuple(_node(rng, functions, events, depth) for _ in range(rng.randint(0 if depth else 1, 7)))
    edges = tuple(
        Edge(rng.randrange(len(nodes)), rng.randrange(len(nodes)), rng.choice((0, 0, 1)), rng.choice((0, 2)),
             rng.choice((0, 0, 1)))
        for _ in range(rng.randrange(2 * len(nodes) + 1) if nodes else 0)
    )  # fmt: skip
    return GraphRecord(nodes, edges)


def random_graph(rng: random.Random) -> tuple[GraphRecord, bytes]:
    """A valid top-level record with every persisted node type, child graphs up to 3 deep, repeated and
    unusual launch attributes, and edge data; with its bytes."""
    while True:
        functions, events = rng.randint(1, 5), rng.randint(0, 2)
        record = dataclasses.replace(_graph(rng, functions, events, 0), function_count=functions, event_count=events)
        try:
            return record, encode_record(record)
        except ValueError:  # more events than a record this small can use: draw again
            continue


def _fields(data: bytes, start: int) -> list[tuple[int, int]]:
    """(offset, width) of every header, node and edge field of the record at ``start`` (child graphs' too)."""
    head = RecHeader.unpack_from(data, start)
    out = [(start + at, width) for at, width in ((4, 2), (6, 2), (8, 4), (12, 4), (16, 4), (20, 4), (24, 8))]
    off = start + L.HEADER_SIZE
    for _ in range(head.node_count):
        node = RecNode.unpack_from(data, off)
        out += [(off, 1), (off + 1, 1), (off + 4, 4)]
        if node.type == NodeType.KERNEL:
            out += [(off + at, w) for at, w in ((8, 4), (12, 4), (40, 1), (41, 1), (42, 2), (44, 2), (46, 2), (48, 4))]
            out += [(off + 52, 4), (off + node.bytes - 1, 1)]
            pcount = int.from_bytes(data[off + 42 : off + 44], "little")
            out += [(off + L.KERNEL_HEAD_SIZE + 4 * k, 4) for k in range(2 * pcount)]
            attrs = off + L.KERNEL_HEAD_SIZE + pcount * L.PARAM_SIZE
            for k in range(int.from_bytes(data[off + 44 : off + 46], "little")):
                out += [(attrs + k * L.ATTR_SIZE + at, 4) for at in (0, 4, 8)]  # id, reserved, value
        elif node.type == NodeType.MEMSET:
            out.append((off + 28, 4))
        elif node.type in (NodeType.WAIT_EVENT, NodeType.EVENT_RECORD):
            out += [(off + 8, 4), (off + 12, 4)]
        elif node.type == NodeType.GRAPH:
            out += _fields(data, off + L.NODE_HEAD_SIZE)
        off += node.bytes
    for j in range(head.edge_count):
        at = off + j * L.EDGE_SIZE
        out += [(at, 4), (at + 4, 4), (at + 8, 1), (at + 10, 1), (at + 11 + j % 5, 1)]
    return out


def mutations(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    """Damaged copies of a valid record: fields set to edge values, single bytes changed, cuts and growth."""
    fields = _fields(data, 0)
    out = []
    for _ in range(count):
        damaged = bytearray(data)
        roll = rng.random()
        if roll < 0.6:
            at, width = rng.choice(fields)
            old = int.from_bytes(data[at : at + width], "little")
            top = (1 << 8 * width) - 1
            near = (old + 1, old - 1, old + 8, old - 8, old + 16)
            new = rng.choice((0, 1, 2, 4, *near, top, rng.getrandbits(8 * width)))
            damaged[at : at + width] = (new & top).to_bytes(width, "little")
        elif roll < 0.9:
            at = rng.randrange(len(data))
            damaged[at] = rng.choice((damaged[at] ^ 1 << rng.randrange(8), 0, 0xFF, rng.getrandbits(8)))
        elif roll < 0.95:
            del damaged[rng.randrange(len(data)) :]
        else:
            damaged += bytes(rng.choice((1, 8, 16)))
            if rng.random() < 0.7:
                damaged[24:32] = len(damaged).to_bytes(8, "little")
        out.append(bytes(damaged))
    return out
