"""Byte layouts of the graph record, the delta and the ``.cugraph`` container (docs/FORMAT.md), and of the
fatbin the kernel image readers take apart.

The record, delta and fatbin layouts are the native code's own (csrc/include/format.h): ``_layout`` holds one
NamedTuple per struct, generated from the header, and every reader and writer goes through those, by
field name (``_offsets``, generated beside it, holds each struct's fields with their offsets). The container is
written and read only in Python; its header is defined here, the same way. Every multi-byte integer is
little-endian, with no padding. Sizes named ``*_SIZE`` include the 8-byte node header where they describe a node
record.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, TypeVar

from . import _layout, _offsets
from ._layout import (
    FATBIN_COMPRESSED_LZ4,
    FATBIN_COMPRESSED_ZSTD,
    FATBIN_ENTRY,
    FATBIN_HEADER,
    FATBIN_MAGIC,
    REC_ATTR,
    REC_DELTA_HEADER,
    REC_EDGE,
    REC_EVENT,
    REC_HEADER,
    REC_KERNEL,
    REC_MEMCPY,
    REC_MEMSET,
    REC_NODE,
    REC_OVERRIDE,
    REC_PARAM,
    Buffer,
    FatbinEntry,
    FatbinHeader,
    FatbinKind,
    RecAttr,
    RecDeltaHeader,
    RecEdge,
    RecEvent,
    RecHeader,
    RecKernel,
    RecMemcpy,
    RecMemset,
    RecNode,
    RecOverride,
    RecParam,
)

__all__ = [
    "ATTR_SIZE",
    "ATTR_VALUE_SIZE",
    "CONTAINER_MAGIC",
    "CONTAINER_RECORD_OFFSET",
    "CONTAINER_SIZE",
    "CONTAINER_VERSION",
    "CONTAINER_VERSIONS",
    "DELTA_HEADER_SIZE",
    "DELTA_MAGIC",
    "DELTA_VERSION",
    "EDGE_SIZE",
    "EMPTY_SIZE",
    "EVENT_SIZE",
    "FATBIN_COMPRESSED_LZ4",
    "FATBIN_COMPRESSED_ZSTD",
    "FATBIN_ENTRY",
    "FATBIN_HEADER",
    "FATBIN_MAGIC",
    "HEADER_SIZE",
    "KERNEL_HEAD_SIZE",
    "MAX_DEPTH",
    "MEMCPY_SIZE",
    "MEMSET_SIZE",
    "NODE_HEAD_SIZE",
    "OVERRIDE_SIZE",
    "PARAM_SIZE",
    "RECORD_MAGIC",
    "RECORD_VERSION",
    "RECORD_VERSIONS",
    "ContainerFields",
    "FatbinEntry",
    "FatbinHeader",
    "FatbinKind",
    "RecAttr",
    "RecDeltaHeader",
    "RecEdge",
    "RecEvent",
    "RecHeader",
    "RecKernel",
    "RecMemcpy",
    "RecMemset",
    "RecNode",
    "RecOverride",
    "RecParam",
    "field_offset",
    "iter_params",
    "offsets",
    "pad8",
    "read_array",
]


def field_offset(struct_name: str, field: str) -> int:
    """The byte offset of ``field`` in ``struct_name`` of format.h (nested fields dotted: ``h.bytes``)."""
    for name, offset, _code in _offsets.LAYOUTS[struct_name][1]:
        if name == field:
            return offset
    raise KeyError(f"{struct_name} has no field {field}")


def offsets(struct_name: str) -> dict[str, int]:
    """Every field of ``struct_name`` in format.h by name (nested ones dotted), with its byte offset."""
    return {name: offset for name, offset, _code in _offsets.LAYOUTS[struct_name][1]}


# KernelNode.params holds each parameter as the plain tuple of rec_param's fields in order, (offset, size):
# a kernel has up to hundreds of parameters and SAVE reads every kernel node, so no named tuple per one.
assert RecParam._fields == ("offset", "size"), "rec_param's fields are (offset, size): KernelNode.params says so"


iter_params = REC_PARAM.iter_unpack
"""The (offset, size) pairs of a parameter table's bytes, in order."""


Element = TypeVar("Element", RecParam, RecEdge, RecAttr)
_ARRAYS: dict[type, struct.Struct] = {RecParam: REC_PARAM, RecEdge: REC_EDGE, RecAttr: REC_ATTR}


def read_array(cls: type[Element], data: Buffer, start: int, count: int) -> list[Element]:
    """``count`` structs of type ``cls`` (a parameter, edge or launch attribute table) stored back to back
    at ``start``; the caller has checked that they lie inside ``data``."""
    layout = _ARRAYS[cls]
    return list(map(cls._make, layout.iter_unpack(memoryview(data)[start : start + count * layout.size])))


# ------------------------------------------------------------------ graph record
RECORD_MAGIC = _layout.RECORD_MAGIC
RECORD_VERSION = _layout.RECORD_VERSION
RECORD_VERSIONS: tuple[int, ...] = (RECORD_VERSION,)
"""Graph record versions this reader understands."""

HEADER_SIZE = REC_HEADER.size
NODE_HEAD_SIZE = REC_NODE.size
KERNEL_HEAD_SIZE = REC_KERNEL.size  # the fixed part, node header included; then params, attrs, arguments
PARAM_SIZE = REC_PARAM.size
ATTR_SIZE = REC_ATTR.size
ATTR_VALUE_SIZE = ATTR_SIZE - field_offset("rec_attr", "value")
MEMSET_SIZE = REC_MEMSET.size
MEMCPY_SIZE = REC_MEMCPY.size
EVENT_SIZE = REC_EVENT.size
EMPTY_SIZE = NODE_HEAD_SIZE
EDGE_SIZE = REC_EDGE.size

MAX_DEPTH = _layout.MAX_DEPTH
"""Deepest child-graph nesting a reader accepts (the top-level graph is depth 0)."""

# ------------------------------------------------------------------ delta
DELTA_MAGIC = _layout.DELTA_MAGIC
DELTA_VERSION = _layout.DELTA_VERSION
DELTA_HEADER_SIZE = REC_DELTA_HEADER.size
OVERRIDE_SIZE = REC_OVERRIDE.size

# ------------------------------------------------------------------ container
CONTAINER_MAGIC = b"FDYGRAPH"
CONTAINER_VERSION = 1
CONTAINER_VERSIONS: tuple[int, ...] = (1,)
_CONTAINER = struct.Struct("<8sIIQQ32s")
CONTAINER_SIZE = _CONTAINER.size
CONTAINER_RECORD_OFFSET = CONTAINER_SIZE  # 64


class ContainerFields(NamedTuple):
    """The ``.cugraph`` container's 64-byte header, field by field (docs/FORMAT.md, "Graph container")."""

    magic: bytes
    version: int
    flags: int
    record_offset: int
    record_size: int
    record_sha256: bytes

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> ContainerFields:
        return ContainerFields._make(_CONTAINER.unpack_from(buffer, offset))

    def pack(self) -> bytes:
        return _CONTAINER.pack(*self)


def pad8(n: int) -> int:
    """``n`` rounded up to a multiple of 8."""
    return (n + 7) & ~7
