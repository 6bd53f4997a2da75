"""The graph record (docs/FORMAT.md, "Graph record"): value objects, strict parser, canonical
encoder and the read-only walks used by ``foundry inspect`` and ``foundry verify``.

This module gathers names defined in ``nodes``, ``record_parse``, ``record_encode`` and
``record_walk`` so that callers have one place to import them from.
"""

from __future__ import annotations

from foundry.archive.nodes import (
    PERSISTED_NODE_TYPES,
    ArgMode,
    ChildGraphNode,
    Edge,
    EmptyNode,
    EventNode,
    GraphRecord,
    KernelNode,
    LaunchAttr,
    MemcpyNode,
    MemsetNode,
    Node,
    NodeType,
)
from foundry.archive.record_encode import encode_record
from foundry.archive.record_parse import parse_record
from foundry.archive.record_walk import (
    TOPOLOGY_KEY_VERSION,
    iter_nodes,
    kernel_pointer_words,
    node_counts,
    topology_key,
)

__all__ = [
    "PERSISTED_NODE_TYPES",
    "TOPOLOGY_KEY_VERSION",
    "ArgMode",
    "ChildGraphNode",
    "Edge",
    "EmptyNode",
    "EventNode",
    "GraphRecord",
    "KernelNode",
    "LaunchAttr",
    "MemcpyNode",
    "MemsetNode",
    "Node",
    "NodeType",
    "encode_record",
    "iter_nodes",
    "kernel_pointer_words",
    "node_counts",
    "parse_record",
    "topology_key",
]
