"""The graph record and what the native code shares with it (csrc/include/format.h, docs/FORMAT.md): the
record's nodes, its strict reader, walks over it, the deltas a template's members are stored as, and the
``.cugraph`` container that carries a record. Bytes only: the native codec writes records and deltas; this
package reads them, without CUDA, torch or any Foundry native module.

``layout`` holds the byte layouts, generated from the C header (``_layout``, scripts/gen_abi.py), for the
readers here and for the fatbin reader of foundry.images. Every reader raises only ``ArchiveError``
subclasses for bad content.
"""

from __future__ import annotations

from . import layout
from ._layout import FUNC_ATTR_UNKNOWN, FuncAttr, FuncAttrs
from .container import container_header, read_container_header, record_view
from .delta import Delta, delta_bytes, delta_header, override_problem, override_spans, parse_delta
from .nodes import ArgMode, ChildGraphNode, GraphRecord, KernelNode, MemcpyNode, MemsetNode, Node, NodeType
from .parse import node_count, parse_record
from .walk import iter_nodes, kernel_pointer_words, node_counts, topology_key, topology_key_of

__all__ = [
    "FUNC_ATTR_UNKNOWN",
    "ArgMode",
    "ChildGraphNode",
    "Delta",
    "FuncAttr",
    "FuncAttrs",
    "GraphRecord",
    "KernelNode",
    "MemcpyNode",
    "MemsetNode",
    "Node",
    "NodeType",
    "container_header",
    "delta_bytes",
    "delta_header",
    "iter_nodes",
    "kernel_pointer_words",
    "layout",
    "node_count",
    "node_counts",
    "override_problem",
    "override_spans",
    "parse_delta",
    "parse_record",
    "read_container_header",
    "record_view",
    "topology_key",
    "topology_key_of",
]
