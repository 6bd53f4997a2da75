"""Read-only views of a parsed graph record, for ``foundry inspect`` and ``foundry verify``."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator

from . import _layout
from ._layout import TOPO_EDGE, TOPO_HEADER, TOPO_KERNEL
from .nodes import PERSISTED_NODE_TYPES, ArgMode, ChildGraphNode, GraphRecord, KernelNode, LaunchAttr, Node, NodeType

__all__ = [
    "TOPOLOGY_KEY_VERSION",
    "iter_nodes",
    "kernel_pointer_words",
    "node_counts",
    "topology_key",
    "topology_key_of",
]

TOPOLOGY_KEY_VERSION = _layout.TOPOLOGY_KEY_VERSION
"""Domain prefix of the topology-key hash; changes whenever the key's definition changes. The material
after it is packed with format.h's ``topo_*`` layouts, which the native scan (fdy_record_scan) packs too."""

_U32X3 = struct.Struct("<3I")  # a cluster-dimension attribute's first 12 bytes
_PLAIN_KERNEL = TOPO_KERNEL.pack(NodeType.KERNEL, 0, 0, 0, 0)  # not cooperative, no cluster
_COUNT_NAMES: dict[NodeType, str] = {
    NodeType.KERNEL: "kernel",
    NodeType.MEMCPY: "memcpy",
    NodeType.MEMSET: "memset",
    NodeType.GRAPH: "child_graph",
    NodeType.EMPTY: "empty",
    NodeType.WAIT_EVENT: "event_wait",
    NodeType.EVENT_RECORD: "event_record",
}
assert set(_COUNT_NAMES) == PERSISTED_NODE_TYPES


def iter_nodes(record: GraphRecord) -> Iterator[tuple[tuple[int, ...], Node]]:
    """Every node of ``record`` and of its child graphs, depth first, parents before children.

    The path is the node's index in the top-level record followed by its index in each child
    graph on the way down: ``(3,)`` is top-level node 3, ``(3, 0)`` the first node of its child.
    """
    return _walk(record, ())


def _walk(record: GraphRecord, prefix: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], Node]]:
    for i, node in enumerate(record.nodes):
        path = (*prefix, i)
        yield path, node
        if isinstance(node, ChildGraphNode):
            yield from _walk(node.record, path)


def node_counts(record: GraphRecord) -> dict[str, int]:
    """Counts over the whole tree (child graphs included): ``nodes`` (all nodes, child-graph nodes
    themselves included), ``edges``, and one key per node type (``kernel``, ``memcpy``, ``memset``,
    ``child_graph``, ``empty``, ``event_wait``, ``event_record``; zero when absent)."""
    counts = {"nodes": 0, "edges": 0, **{name: 0 for name in _COUNT_NAMES.values()}}
    stack = [record]
    while stack:
        rec = stack.pop()
        counts["nodes"] += len(rec.nodes)
        counts["edges"] += len(rec.edges)
        for node in rec.nodes:
            counts[_COUNT_NAMES[node.node_type]] += 1
            if isinstance(node, ChildGraphNode):
                stack.append(node.record)
    return counts


def kernel_pointer_words(node: KernelNode) -> Iterator[tuple[int, int, int]]:
    """``(param index, byte offset, value)`` for every 8-byte-aligned little-endian u64 of the
    argument buffer that could hold a pointer.

    Mode ``PARAMS``: the aligned words that lie wholly inside one parameter, tagged with that
    parameter's index, in parameter order (a word that straddles two parameters or lies in padding
    between them cannot be a pointer argument and is skipped). Mode ``EXTRA``: every aligned word of
    the buffer, tagged -1, since the buffer's layout is unknown. Offsets are from the buffer start.
    """
    args = node.args
    if node.arg_mode == ArgMode.EXTRA:
        for off in range(0, len(args) - 7, 8):
            yield -1, off, int.from_bytes(args[off : off + 8], "little")
        return
    seen: set[int] = set()
    for index, (poff, psize) in enumerate(node.params):
        for off in range((poff + 7) & ~7, poff + psize - 7, 8):
            if off not in seen and off + 8 <= len(args):
                seen.add(off)
                yield index, off, int.from_bytes(args[off : off + 8], "little")


def topology_key(record: GraphRecord) -> str:
    """Hex SHA-256 of what two graphs must share for one to be updated into the other.

    Covers, in order: node and edge counts; per node its type, and for kernel nodes whether the
    launch is cooperative (attribute 2, first u32 non-zero) and the cluster dimensions (attribute 4,
    three u32, 0 0 0 when absent); for child-graph nodes the child's own key (raw digest); then the
    edges with their ports and type, sorted. Function indices, grids, blocks, shared memory,
    arguments, memset/memcpy parameters and event indices are not covered. docs/FORMAT.md gives
    the exact byte string hashed.
    """
    return _topology_digest(record).hex()


def topology_key_of(material: bytes) -> str:
    """The topology key of a record without child graphs from the byte string the key hashes after its
    ``FTK1`` prefix (what the native scan of a record returns: foundry.native.scan_record)."""
    return hashlib.sha256(TOPOLOGY_KEY_VERSION + material).hexdigest()


def _topology_digest(record: GraphRecord) -> bytes:
    h = hashlib.sha256(TOPOLOGY_KEY_VERSION)
    parts = [TOPO_HEADER.pack(len(record.nodes), len(record.edges))]
    for node in record.nodes:
        if isinstance(node, KernelNode):
            coop = node.attr(LaunchAttr.COOPERATIVE) if node.attrs else None
            cluster = node.attr(LaunchAttr.CLUSTER_DIMENSION) if node.attrs else None
            if coop is None and cluster is None:
                parts.append(_PLAIN_KERNEL)  # the common case: no launch attribute the key covers
                continue
            cx, cy, cz = _U32X3.unpack_from((cluster or b"") + bytes(12))
            cooperative = 1 if coop is not None and int.from_bytes(coop[:4], "little") else 0
            parts.append(TOPO_KERNEL.pack(NodeType.KERNEL, cooperative, cx, cy, cz))
        elif isinstance(node, ChildGraphNode):
            parts.append(bytes((NodeType.GRAPH,)))
            parts.append(_topology_digest(node.record))
        else:
            parts.append(bytes((node.node_type,)))
    edges = sorted((e.src, e.dst, e.from_port, e.to_port, e.type) for e in record.edges)
    parts += [TOPO_EDGE.pack(*e) for e in edges]
    h.update(b"".join(parts))  # one update: hashing the same bytes piece by piece costs a call per node
    return h.digest()
