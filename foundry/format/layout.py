"""Byte layouts of the graph record and the ``.cugraph`` container (docs/FORMAT.md), as constants.

Every multi-byte integer is little-endian; the ``struct`` formats use ``<`` so that no alignment
padding is ever inserted. Sizes named ``*_SIZE`` include the 8-byte node header where they describe
a node record.
"""

from __future__ import annotations

import struct
from functools import lru_cache

__all__ = [
    "ATTR",
    "ATTR_SIZE",
    "ATTR_VALUE_SIZE",
    "CONTAINER",
    "CONTAINER_MAGIC",
    "CONTAINER_RECORD_OFFSET",
    "CONTAINER_VERSION",
    "CONTAINER_VERSIONS",
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
    "PARAM_SIZE",
    "RECORD_MAGIC",
    "RECORD_VERSION",
    "RECORD_VERSIONS",
    "pad8",
    "params_struct",
]

# ------------------------------------------------------------------ graph record
RECORD_MAGIC = b"FGR1"
RECORD_VERSION = 1
RECORD_VERSIONS: tuple[int, ...] = (1,)
"""Graph record versions this reader understands."""

# magic, version, header size, node count, edge count, function count, event count, total bytes
HEADER = struct.Struct("<4sHHIIIIQ")
HEADER_SIZE = HEADER.size  # 32

# node type, reserved u8, reserved u16, record size
NODE_HEAD = struct.Struct("<BBHI")
NODE_HEAD_SIZE = NODE_HEAD.size  # 8

# At node offset 8: function index, grid xyz, block xyz, shared bytes, argument mode, reserved u8,
# parameter count, attribute count, reserved u16, argument-buffer size, reserved u32.
KERNEL_FIXED = struct.Struct("<8IBBHHHII")
KERNEL_HEAD_SIZE = NODE_HEAD_SIZE + KERNEL_FIXED.size  # 56
PARAM_SIZE = 8  # u32 offset, u32 size
ATTR_VALUE_SIZE = 64
ATTR = struct.Struct(f"<II{ATTR_VALUE_SIZE}s")  # id, reserved, value
ATTR_SIZE = ATTR.size  # 72

MEMSET = struct.Struct("<QQIIQQ")  # dst, pitch, value, element size, width, height
MEMSET_SIZE = NODE_HEAD_SIZE + MEMSET.size  # 48
MEMCPY = struct.Struct("<15Q2I")
MEMCPY_SIZE = NODE_HEAD_SIZE + MEMCPY.size  # 136
EVENT = struct.Struct("<II")  # event index, reserved
EVENT_SIZE = NODE_HEAD_SIZE + EVENT.size  # 16
EMPTY_SIZE = NODE_HEAD_SIZE  # 8

EDGE = struct.Struct("<IIBBB5s")  # from, to, from port, to port, type, reserved[5]
EDGE_SIZE = EDGE.size  # 16

MAX_DEPTH = 64
"""Deepest child-graph nesting a reader accepts (the top-level graph is depth 0)."""

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
