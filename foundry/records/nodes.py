"""Value objects of a graph record (docs/FORMAT.md, "Graph record").

These are plain frozen dataclasses: they hold exactly what the record holds, nothing derived.
``parse_record`` builds them from bytes (which the native codec wrote); construction does not validate.
Tests turn them back into canonical bytes with tests/support/encode.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from ._layout import ArgMode, LaunchAttr, NodeType

__all__ = [
    "PERSISTED_NODE_TYPES",
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
]


PERSISTED_NODE_TYPES: frozenset[NodeType] = frozenset(
    {
        NodeType.KERNEL,
        NodeType.MEMCPY,
        NodeType.MEMSET,
        NodeType.GRAPH,
        NodeType.EMPTY,
        NodeType.WAIT_EVENT,
        NodeType.EVENT_RECORD,
    }
)


@dataclass(frozen=True, slots=True)
class KernelNode:
    """A kernel launch. ``params[i] = (offset, size)`` of parameter i inside ``args``;
    ``attrs[k] = (CUlaunchAttributeID, 64-byte CUlaunchAttributeValue)``."""

    function_index: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    arg_mode: ArgMode
    params: tuple[tuple[int, int], ...]
    attrs: tuple[tuple[int, bytes], ...]
    args: bytes

    @property
    def node_type(self) -> NodeType:
        return NodeType.KERNEL

    def attr(self, attr_id: int) -> bytes | None:
        """The value of launch attribute ``attr_id`` (the last one if repeated), or None."""
        found = None
        for key, value in self.attrs:
            if key == attr_id:
                found = value
        return found


@dataclass(frozen=True, slots=True)
class MemsetNode:
    """``CUDA_MEMSET_NODE_PARAMS`` (device memory only)."""

    dst: int
    pitch: int
    value: int
    element_size: int
    width: int
    height: int

    @property
    def node_type(self) -> NodeType:
        return NodeType.MEMSET


@dataclass(frozen=True, slots=True)
class MemcpyNode:
    """``CUDA_MEMCPY3D`` of a device-to-device copy (``*_memory_type`` are ``CUmemorytype``)."""

    src_device: int
    src_x_bytes: int
    src_y: int
    src_z: int
    src_pitch: int
    src_height: int
    dst_device: int
    dst_x_bytes: int
    dst_y: int
    dst_z: int
    dst_pitch: int
    dst_height: int
    width_bytes: int
    height: int
    depth: int
    src_memory_type: int
    dst_memory_type: int

    @property
    def node_type(self) -> NodeType:
        return NodeType.MEMCPY


@dataclass(frozen=True, slots=True)
class EventNode:
    """An event wait (``kind`` = WAIT_EVENT) or event record (``kind`` = EVENT_RECORD) node.
    ``event_index`` numbers the events LOAD creates (below the top-level ``event_count``)."""

    kind: NodeType
    event_index: int

    @property
    def node_type(self) -> NodeType:
        return self.kind


@dataclass(frozen=True, slots=True)
class EmptyNode:
    """A node that does nothing and only orders others."""

    @property
    def node_type(self) -> NodeType:
        return NodeType.EMPTY


@dataclass(frozen=True, slots=True)
class ChildGraphNode:
    """A child graph. Its record has ``function_count == event_count == 0``: it uses the tables
    of the top-level record."""

    record: GraphRecord

    @property
    def node_type(self) -> NodeType:
        return NodeType.GRAPH


Node: TypeAlias = KernelNode | MemcpyNode | MemsetNode | EventNode | EmptyNode | ChildGraphNode


@dataclass(frozen=True, slots=True)
class Edge:
    """A dependency ``src -> dst`` with its ``CUgraphEdgeData`` (ports and dependency type)."""

    src: int
    dst: int
    from_port: int = 0
    to_port: int = 0
    type: int = 0


@dataclass(frozen=True, slots=True)
class GraphRecord:
    """One graph: nodes in node-index order and the edges between them.

    ``function_count``/``event_count`` are the sizes of the function and event tables; they are
    meaningful at the top level only and are 0 in child graphs.
    """

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    function_count: int = 0
    event_count: int = 0
