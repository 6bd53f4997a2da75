"""Byte layouts of the graph record, the delta and the ``.cugraph`` container (docs/FORMAT.md), as
``struct.Struct`` objects.

The record and delta layouts are the native code's own (csrc/include/format.h, through the generated
``_layout``); the container is written and read only here. Every multi-byte integer is little-endian,
and the ``struct`` formats use ``<`` so that no alignment padding is ever inserted. Sizes named
``*_SIZE`` include the 8-byte node header where they describe a node record.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from . import _layout

__all__ = [
    "ATTR",
    "ATTR_SIZE",
    "ATTR_VALUE_SIZE",
    "CONTAINER",
    "CONTAINER_MAGIC",
    "CONTAINER_RECORD_OFFSET",
    "CONTAINER_VERSION",
    "CONTAINER_VERSIONS",
    "DELTA_HEADER",
    "DELTA_MAGIC",
    "DELTA_VERSION",
    "EDGE",
    "EDGE_SIZE",
    "EMPTY_SIZE",
    "EVENT",
    "EVENT_SIZE",
    "HEADER",
    "HEADER_SIZE",
    "KERNEL_FIXED",
    "KERNEL_HEAD_SIZE",
    "MAX_DEPTH",
    "MEMCPY",
    "MEMCPY_SIZE",
    "MEMSET",
    "MEMSET_SIZE",
    "NODE_HEAD",
    "NODE_HEAD_SIZE",
    "OVERRIDE",
    "PARAM_SIZE",
    "RECORD_MAGIC",
    "RECORD_VERSION",
    "RECORD_VERSIONS",
    "field_offset",
    "pad8",
    "params_struct",
]


def _struct(name: str, after: str | None = None) -> struct.Struct:
    """The little-endian packed struct of ``name`` in format.h; with ``after``, only the fields that
    follow the nested struct ``after`` (node records are read past their common 8-byte header)."""
    size, rows = _layout.LAYOUTS[name]
    if after is not None:
        rows = tuple(r for r in rows if not r[0].startswith(f"{after}."))
    fmt = "<" + "".join(code for _, _, code in rows)
    result = struct.Struct(fmt)
    start = rows[0][1]
    if result.size != size - start:  # a field the struct format skips (padding) would misalign all reads
        raise AssertionError(f"layout of {name}: {fmt} is {result.size} bytes, the header says {size - start}")
    return result


def field_offset(struct_name: str, field: str) -> int:
    """The byte offset of ``field`` in ``struct_name`` of format.h (nested fields dotted: ``h.bytes``)."""
    for name, offset, _code in _layout.LAYOUTS[struct_name][1]:
        if name == field:
            return offset
    raise KeyError(f"{struct_name} has no field {field}")


# ------------------------------------------------------------------ graph record
RECORD_MAGIC = _layout.RECORD_MAGIC
RECORD_VERSION = _layout.RECORD_VERSION
RECORD_VERSIONS: tuple[int, ...] = (RECORD_VERSION,)
"""Graph record versions this reader understands."""

# magic, version, header size, node count, edge count, function count, event count, total bytes
HEADER = _struct("rec_header")
HEADER_SIZE = HEADER.size
# node type, reserved u8, reserved u16, record size
NODE_HEAD = _struct("rec_node")
NODE_HEAD_SIZE = NODE_HEAD.size
# After the node header: function index, grid xyz, block xyz, shared bytes, argument mode, reserved
# u8, parameter count, attribute count, reserved u16, argument-buffer size, reserved u32.
KERNEL_FIXED = _struct("rec_kernel", after="h")
KERNEL_HEAD_SIZE = _layout.LAYOUTS["rec_kernel"][0]
PARAM_SIZE = _layout.LAYOUTS["rec_param"][0]  # u32 offset, u32 size
ATTR = _struct("rec_attr")  # id, reserved, value
ATTR_SIZE = ATTR.size
ATTR_VALUE_SIZE = ATTR_SIZE - field_offset("rec_attr", "value")
MEMSET = _struct("rec_memset", after="h")  # dst, pitch, value, element size, width, height
MEMSET_SIZE = _layout.LAYOUTS["rec_memset"][0]
MEMCPY = _struct("rec_memcpy", after="h")
MEMCPY_SIZE = _layout.LAYOUTS["rec_memcpy"][0]
EVENT = _struct("rec_event", after="h")  # event index, reserved
EVENT_SIZE = _layout.LAYOUTS["rec_event"][0]
EMPTY_SIZE = NODE_HEAD_SIZE
EDGE = _struct("rec_edge")  # from, to, from port, to port, type, reserved[5]
EDGE_SIZE = EDGE.size

MAX_DEPTH = 64
"""Deepest child-graph nesting a reader accepts (the top-level graph is depth 0)."""

# ------------------------------------------------------------------ delta
DELTA_MAGIC = _layout.DELTA_MAGIC
DELTA_VERSION = _layout.DELTA_VERSION
# magic, version, header size, override count, function count, reserved x2, total bytes, template SHA-256
DELTA_HEADER = _struct("rec_delta_header")
OVERRIDE = _struct("rec_override")  # node index, reserved

# ------------------------------------------------------------------ container
CONTAINER_MAGIC = b"FDYGRAPH"
CONTAINER_VERSION = 1
CONTAINER_VERSIONS: tuple[int, ...] = (1,)
# magic, version, flags, record offset, record size, record SHA-256
CONTAINER = struct.Struct("<8sIIQQ32s")
CONTAINER_RECORD_OFFSET = CONTAINER.size  # 64


def pad8(n: int) -> int:
    """``n`` rounded up to a multiple of 8."""
    return (n + 7) & ~7


@lru_cache(maxsize=256)
def params_struct(count: int) -> struct.Struct:
    """The ``struct.Struct`` of a parameter table with ``count`` (offset, size) pairs."""
    return struct.Struct(f"<{2 * count}I")
