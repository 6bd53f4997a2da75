"""Generated from csrc/include/format.h by scripts/gen_abi.py: do not edit.

Regenerate with `python scripts/gen_abi.py` after changing the header; CI checks that this file is
what the header gives."""

from __future__ import annotations

import builtins
import mmap
import struct
from enum import IntEnum
from typing import NamedTuple

Buffer = bytes | bytearray | memoryview | mmap.mmap
_new = tuple.__new__

RECORD_MAGIC = b"FGR1"
RECORD_VERSION = 1
DELTA_MAGIC = b"FGD1"
DELTA_VERSION = 1
MAX_DEPTH = 64
FUNC_ATTR_COUNT = 7
FUNC_ATTR_UNKNOWN = -2147483648
TOPOLOGY_KEY_VERSION = b"FTK1"
FATBIN_MAGIC = 3126193488
FATBIN_WRAPPER_MAGIC = 1180844977
FATBIN_COMPRESSED_LZ4 = 8192
FATBIN_COMPRESSED_ZSTD = 32768

LAYOUT_DIGEST = "197b92223a49a818"
"""Of the record and delta structs (field names, C types, array lengths, offsets), listed in format.h for
RECORD_VERSION and DELTA_VERSION."""


class ArgMode(IntEnum):
    """``enum fdy_arg_mode``."""

    PARAMS = 0
    EXTRA = 1


class FatbinKind(IntEnum):
    """``enum fdy_fatbin_kind``."""

    PTX = 1
    ELF = 2


class NodeType(IntEnum):
    """cuda.h's ``CU_GRAPH_NODE_TYPE_*`` values that ``FDY_NODE_TYPES`` names."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    HOST = 3
    GRAPH = 4
    EMPTY = 5
    WAIT_EVENT = 6
    EVENT_RECORD = 7
    EXT_SEMAS_SIGNAL = 8
    EXT_SEMAS_WAIT = 9
    MEM_ALLOC = 10
    MEM_FREE = 11
    BATCH_MEM_OP = 12
    CONDITIONAL = 13


class LaunchAttr(IntEnum):
    """cuda.h's ``CU_LAUNCH_ATTRIBUTE_*`` values that ``FDY_LAUNCH_ATTRS`` names."""

    ACCESS_POLICY_WINDOW = 1
    COOPERATIVE = 2
    CLUSTER_DIMENSION = 4
    CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
    PRIORITY = 8
    MEM_SYNC_DOMAIN_MAP = 9
    MEM_SYNC_DOMAIN = 10
    PREFERRED_CLUSTER_DIMENSION = 11
    DEVICE_UPDATABLE_KERNEL_NODE = 13
    NVLINK_UTIL_CENTRIC_SCHEDULING = 16


class FuncAttr(IntEnum):
    """cuda.h's ``CU_FUNC_ATTRIBUTE_*`` values that ``FDY_FUNC_ATTRS`` names."""

    MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    PREFERRED_SHARED_MEMORY_CARVEOUT = 9
    REQUIRED_CLUSTER_WIDTH = 11
    REQUIRED_CLUSTER_HEIGHT = 12
    REQUIRED_CLUSTER_DEPTH = 13
    NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
    CLUSTER_SCHEDULING_POLICY_PREFERENCE = 15


class FuncAttrs(NamedTuple):
    """A table of ``FDY_FUNC_ATTRS``: one int32 per FuncAttr, in its order."""

    max_dynamic_shared_size_bytes: int
    preferred_shared_memory_carveout: int
    required_cluster_width: int
    required_cluster_height: int
    required_cluster_depth: int
    non_portable_cluster_size_allowed: int
    cluster_scheduling_policy_preference: int


REC_HEADER = struct.Struct("<4sHHIIIIQ")


class RecHeader(NamedTuple):
    """``rec_header`` (32 bytes, little-endian, packed)."""

    magic: bytes
    version: int
    header_bytes: int
    node_count: int
    edge_count: int
    function_count: int
    event_count: int
    total_bytes: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecHeader:
        return RecHeader._make(REC_HEADER.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_HEADER.pack(
            self.magic,
            self.version,
            self.header_bytes,
            self.node_count,
            self.edge_count,
            self.function_count,
            self.event_count,
            self.total_bytes,
        )


REC_NODE = struct.Struct("<BBHI")


class RecNode(NamedTuple):
    """``rec_node`` (8 bytes, little-endian, packed)."""

    type: int
    reserved0: int
    reserved1: int
    bytes: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecNode:
        return RecNode._make(REC_NODE.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_NODE.pack(self.type, self.reserved0, self.reserved1, self.bytes)


REC_KERNEL = struct.Struct("<BBHII3I3IIBBHHHII")


class RecKernel(NamedTuple):
    """``rec_kernel`` (56 bytes, little-endian, packed)."""

    h_type: int
    h_reserved0: int
    h_reserved1: int
    h_bytes: int
    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    arg_mode: int
    reserved0: int
    param_count: int
    attr_count: int
    reserved1: int
    arg_bytes: int
    reserved2: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecKernel:
        v = REC_KERNEL.unpack_from(buffer, offset)
        return _new(
            RecKernel,
            (v[0], v[1], v[2], v[3], v[4], v[5:8], v[8:11], v[11], v[12], v[13], v[14], v[15], v[16], v[17], v[18]),
        )

    def pack(self) -> builtins.bytes:
        return REC_KERNEL.pack(
            self.h_type,
            self.h_reserved0,
            self.h_reserved1,
            self.h_bytes,
            self.function,
            *self.grid,
            *self.block,
            self.shared_mem,
            self.arg_mode,
            self.reserved0,
            self.param_count,
            self.attr_count,
            self.reserved1,
            self.arg_bytes,
            self.reserved2,
        )


REC_PARAM = struct.Struct("<II")


class RecParam(NamedTuple):
    """``rec_param`` (8 bytes, little-endian, packed)."""

    offset: int
    size: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecParam:
        return RecParam._make(REC_PARAM.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_PARAM.pack(self.offset, self.size)


REC_ATTR = struct.Struct("<II64s")


class RecAttr(NamedTuple):
    """``rec_attr`` (72 bytes, little-endian, packed)."""

    id: int
    reserved: int
    value: bytes

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecAttr:
        return RecAttr._make(REC_ATTR.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_ATTR.pack(self.id, self.reserved, self.value)


REC_MEMSET = struct.Struct("<BBHIQQIIQQ")


class RecMemset(NamedTuple):
    """``rec_memset`` (48 bytes, little-endian, packed)."""

    h_type: int
    h_reserved0: int
    h_reserved1: int
    h_bytes: int
    dst: int
    pitch: int
    value: int
    element_size: int
    width: int
    height: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecMemset:
        return RecMemset._make(REC_MEMSET.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_MEMSET.pack(
            self.h_type,
            self.h_reserved0,
            self.h_reserved1,
            self.h_bytes,
            self.dst,
            self.pitch,
            self.value,
            self.element_size,
            self.width,
            self.height,
        )


REC_MEMCPY = struct.Struct("<BBHIQQQQQQQQQQQQQQQII")


class RecMemcpy(NamedTuple):
    """``rec_memcpy`` (136 bytes, little-endian, packed)."""

    h_type: int
    h_reserved0: int
    h_reserved1: int
    h_bytes: int
    src_device: int
    src_x: int
    src_y: int
    src_z: int
    src_pitch: int
    src_height: int
    dst_device: int
    dst_x: int
    dst_y: int
    dst_z: int
    dst_pitch: int
    dst_height: int
    width: int
    height: int
    depth: int
    src_type: int
    dst_type: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecMemcpy:
        return RecMemcpy._make(REC_MEMCPY.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_MEMCPY.pack(
            self.h_type,
            self.h_reserved0,
            self.h_reserved1,
            self.h_bytes,
            self.src_device,
            self.src_x,
            self.src_y,
            self.src_z,
            self.src_pitch,
            self.src_height,
            self.dst_device,
            self.dst_x,
            self.dst_y,
            self.dst_z,
            self.dst_pitch,
            self.dst_height,
            self.width,
            self.height,
            self.depth,
            self.src_type,
            self.dst_type,
        )


REC_EVENT = struct.Struct("<BBHIII")


class RecEvent(NamedTuple):
    """``rec_event`` (16 bytes, little-endian, packed)."""

    h_type: int
    h_reserved0: int
    h_reserved1: int
    h_bytes: int
    event: int
    reserved: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecEvent:
        return RecEvent._make(REC_EVENT.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_EVENT.pack(self.h_type, self.h_reserved0, self.h_reserved1, self.h_bytes, self.event, self.reserved)


REC_EDGE = struct.Struct("<IIBBB5s")


class RecEdge(NamedTuple):
    """``rec_edge`` (16 bytes, little-endian, packed)."""

    from_: int
    to: int
    from_port: int
    to_port: int
    type: int
    reserved: bytes

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecEdge:
        return RecEdge._make(REC_EDGE.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_EDGE.pack(self.from_, self.to, self.from_port, self.to_port, self.type, self.reserved)


REC_DELTA_HEADER = struct.Struct("<4sHHIIIIQ32s")


class RecDeltaHeader(NamedTuple):
    """``rec_delta_header`` (64 bytes, little-endian, packed)."""

    magic: bytes
    version: int
    header_bytes: int
    override_count: int
    function_count: int
    reserved0: int
    reserved1: int
    total_bytes: int
    template_sha256: bytes

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecDeltaHeader:
        return RecDeltaHeader._make(REC_DELTA_HEADER.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_DELTA_HEADER.pack(
            self.magic,
            self.version,
            self.header_bytes,
            self.override_count,
            self.function_count,
            self.reserved0,
            self.reserved1,
            self.total_bytes,
            self.template_sha256,
        )


REC_OVERRIDE = struct.Struct("<II")


class RecOverride(NamedTuple):
    """``rec_override`` (8 bytes, little-endian, packed)."""

    node_index: int
    reserved: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> RecOverride:
        return RecOverride._make(REC_OVERRIDE.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return REC_OVERRIDE.pack(self.node_index, self.reserved)


TOPO_HEADER = struct.Struct("<II")


class TopoHeader(NamedTuple):
    """``topo_header`` (8 bytes, little-endian, packed)."""

    node_count: int
    edge_count: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> TopoHeader:
        return TopoHeader._make(TOPO_HEADER.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return TOPO_HEADER.pack(self.node_count, self.edge_count)


TOPO_KERNEL = struct.Struct("<BB3I")


class TopoKernel(NamedTuple):
    """``topo_kernel`` (14 bytes, little-endian, packed)."""

    type: int
    cooperative: int
    cluster: tuple[int, int, int]

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> TopoKernel:
        v = TOPO_KERNEL.unpack_from(buffer, offset)
        return _new(TopoKernel, (v[0], v[1], v[2:5]))

    def pack(self) -> builtins.bytes:
        return TOPO_KERNEL.pack(self.type, self.cooperative, *self.cluster)


TOPO_EDGE = struct.Struct("<IIBBB")


class TopoEdge(NamedTuple):
    """``topo_edge`` (11 bytes, little-endian, packed)."""

    from_: int
    to: int
    from_port: int
    to_port: int
    type: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> TopoEdge:
        return TopoEdge._make(TOPO_EDGE.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return TOPO_EDGE.pack(self.from_, self.to, self.from_port, self.to_port, self.type)


FATBIN_HEADER = struct.Struct("<IHHQ")


class FatbinHeader(NamedTuple):
    """``fatbin_header`` (16 bytes, little-endian, packed)."""

    magic: int
    version: int
    header_size: int
    fat_size: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> FatbinHeader:
        return FatbinHeader._make(FATBIN_HEADER.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return FATBIN_HEADER.pack(self.magic, self.version, self.header_size, self.fat_size)


FATBIN_ENTRY = struct.Struct("<HHIQIIIIQQQQ")


class FatbinEntry(NamedTuple):
    """``fatbin_entry`` (64 bytes, little-endian, packed)."""

    kind: int
    version: int
    header_size: int
    payload_size: int
    compressed_size: int
    unknown0: int
    unknown1: int
    sm_arch: int
    unknown2: int
    flags: int
    unknown3: int
    uncompressed_size: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> FatbinEntry:
        return FatbinEntry._make(FATBIN_ENTRY.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return FATBIN_ENTRY.pack(
            self.kind,
            self.version,
            self.header_size,
            self.payload_size,
            self.compressed_size,
            self.unknown0,
            self.unknown1,
            self.sm_arch,
            self.unknown2,
            self.flags,
            self.unknown3,
            self.uncompressed_size,
        )


FATBIN_WRAPPER = struct.Struct("<IIQQ")


class FatbinWrapper(NamedTuple):
    """``fatbin_wrapper`` (24 bytes, little-endian, packed)."""

    magic: int
    version: int
    data: int
    filename_or_fatbins: int

    @staticmethod
    def unpack_from(buffer: Buffer, offset: int = 0) -> FatbinWrapper:
        return FatbinWrapper._make(FATBIN_WRAPPER.unpack_from(buffer, offset))

    def pack(self) -> builtins.bytes:
        return FATBIN_WRAPPER.pack(self.magic, self.version, self.data, self.filename_or_fatbins)
