"""Generated from csrc/include/foundry.h by scripts/gen_abi.py: do not edit.

Regenerate with `python scripts/gen_abi.py` after changing the header; CI checks that this file is
what the header gives."""

from __future__ import annotations

import ctypes
from enum import IntEnum

ABI_VERSION = 16
OK = 0
REGION_SMALL_ALIGN = 512


class ErrorCode(IntEnum):
    """``enum fdy_error_code``."""

    NO_DRIVER = 10001
    REGION_STATE = 10002
    BASE_TAKEN = 10003
    REGION_FULL = 10004
    UNSUPPORTED = 10005
    INVALID = 10006
    NOT_FOUND = 10007
    CORRUPT = 10008
    NO_PARAM_INFO = 10009
    TRUNCATED = 10010
    PARAM_MISMATCH = 10011


class ReadPath(IntEnum):
    """``enum fdy_read_path``."""

    NONE = 0
    BATCH = 1
    ASYNC = 2
    SYNC = 3


class AllocKind(IntEnum):
    """``enum fdy_alloc_kind``."""

    ALLOC = 1
    FREE = 2
    ASYNC_ALLOC = 3
    ASYNC_FREE = 4
    VMM_RESERVE = 5
    VMM_FREE = 6
    VMM_MAP = 7
    VMM_UNMAP = 8
    PREALLOC = 9
    PREALLOC_FREE = 10
    RESTORE = 11
    CURSOR = 12
    REFUSED = 13


class ImageKind(IntEnum):
    """``enum fdy_image_kind``."""

    MODULE = 1
    LIBRARY = 2


class ImageFormat(IntEnum):
    """``enum fdy_image_format``."""

    UNKNOWN = 0
    FATBIN = 1
    ELF = 2
    PTX = 3


class CudaResult(IntEnum):
    """cuda.h's ``CUDA_*`` values that ``FDY_CUDA_RESULTS`` names."""

    SUCCESS = 0
    ERROR_NOT_FOUND = 500


class DeviceAttr(IntEnum):
    """cuda.h's ``CU_DEVICE_ATTRIBUTE_*`` values that ``FDY_DEVICE_ATTRS`` names."""

    MULTIPROCESSOR_COUNT = 16
    COMPUTE_CAPABILITY_MAJOR = 75
    COMPUTE_CAPABILITY_MINOR = 76


class InstantiateFlag(IntEnum):
    """cuda.h's ``CUDA_GRAPH_INSTANTIATE_FLAG_*`` values that ``FDY_INSTANTIATE_FLAGS`` names."""

    USE_NODE_PRIORITY = 8
    DEVICE_LAUNCH = 4


class ReadReport(ctypes.Structure):
    """``fdy_read_report`` (24 bytes)."""

    _fields_ = [
        ("failed", ctypes.c_uint64),
        ("calls", ctypes.c_uint64),
        ("path", ctypes.c_uint32),
        ("cause", ctypes.c_int32),
    ]


class RegionInfo(ctypes.Structure):
    """``fdy_region_info`` (80 bytes)."""

    _fields_ = [
        ("base", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("cursor", ctypes.c_uint64),
        ("high_water", ctypes.c_uint64),
        ("granularity", ctypes.c_uint64),
        ("mapped_bytes", ctypes.c_uint64),
        ("prealloc_offset", ctypes.c_uint64),
        ("prealloc_size", ctypes.c_uint64),
        ("device", ctypes.c_int32),
        ("active", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("small_align", ctypes.c_uint32),
    ]


class AllocEvent(ctypes.Structure):
    """``fdy_alloc_event`` (40 bytes)."""

    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("span", ctypes.c_uint64),
        ("kind", ctypes.c_uint32),
        ("tid", ctypes.c_uint32),
    ]


class ImportsSummary(ctypes.Structure):
    """``fdy_imports_summary`` (32 bytes)."""

    _fields_ = [
        ("ipc_open", ctypes.c_uint64),
        ("mappings", ctypes.c_uint64),
        ("handles", ctypes.c_uint64),
        ("untracked", ctypes.c_uint64),
    ]


class ImportMapping(ctypes.Structure):
    """``fdy_import_mapping`` (32 bytes)."""

    _fields_ = [
        ("address", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("handle_type", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("in_region", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    ]


class ImageInfo(ctypes.Structure):
    """``fdy_image_info`` (120 bytes)."""

    _fields_ = [
        ("handle", ctypes.c_uint64),
        ("data", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("kind", ctypes.c_uint32),
        ("format", ctypes.c_uint32),
        ("owned", ctypes.c_uint32),
        ("loaded", ctypes.c_uint32),
        ("restored", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("hash", ctypes.c_char * 68),
    ]


class RecordScanInfo(ctypes.Structure):
    """``fdy_record_scan_info`` (96 bytes)."""

    _fields_ = [
        ("node_count", ctypes.c_uint32),
        ("edge_count", ctypes.c_uint32),
        ("function_count", ctypes.c_uint32),
        ("event_count", ctypes.c_uint32),
        ("nodes", ctypes.c_uint64),
        ("edges", ctypes.c_uint64),
        ("kernel", ctypes.c_uint64),
        ("memcpy", ctypes.c_uint64),
        ("memset", ctypes.c_uint64),
        ("child_graph", ctypes.c_uint64),
        ("empty", ctypes.c_uint64),
        ("event_wait", ctypes.c_uint64),
        ("event_record", ctypes.c_uint64),
        ("children", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    ]


# field -> (offset, size) of each struct, as the compiler lays it out
OFFSETS: dict[str, dict[str, tuple[int, int]]] = {
    "ReadReport": {
        "failed": (0, 8),
        "calls": (8, 8),
        "path": (16, 4),
        "cause": (20, 4),
    },
    "RegionInfo": {
        "base": (0, 8),
        "size": (8, 8),
        "cursor": (16, 8),
        "high_water": (24, 8),
        "granularity": (32, 8),
        "mapped_bytes": (40, 8),
        "prealloc_offset": (48, 8),
        "prealloc_size": (56, 8),
        "device": (64, 4),
        "active": (68, 4),
        "reserved": (72, 4),
        "small_align": (76, 4),
    },
    "AllocEvent": {
        "seq": (0, 8),
        "offset": (8, 8),
        "size": (16, 8),
        "span": (24, 8),
        "kind": (32, 4),
        "tid": (36, 4),
    },
    "ImportsSummary": {
        "ipc_open": (0, 8),
        "mappings": (8, 8),
        "handles": (16, 8),
        "untracked": (24, 8),
    },
    "ImportMapping": {
        "address": (0, 8),
        "size": (8, 8),
        "handle_type": (16, 4),
        "device": (20, 4),
        "in_region": (24, 4),
        "pad": (28, 4),
    },
    "ImageInfo": {
        "handle": (0, 8),
        "data": (8, 8),
        "size": (16, 8),
        "kind": (24, 4),
        "format": (28, 4),
        "owned": (32, 4),
        "loaded": (36, 4),
        "restored": (40, 4),
        "pad": (44, 4),
        "hash": (48, 68),
    },
    "RecordScanInfo": {
        "node_count": (0, 4),
        "edge_count": (4, 4),
        "function_count": (8, 4),
        "event_count": (12, 4),
        "nodes": (16, 8),
        "edges": (24, 8),
        "kernel": (32, 8),
        "memcpy": (40, 8),
        "memset": (48, 8),
        "child_graph": (56, 8),
        "empty": (64, 8),
        "event_wait": (72, 8),
        "event_record": (80, 8),
        "children": (88, 4),
        "pad": (92, 4),
    },
}
SIZES: dict[str, int] = {
    "ReadReport": 24,
    "RegionInfo": 80,
    "AllocEvent": 40,
    "ImportsSummary": 32,
    "ImportMapping": 32,
    "ImageInfo": 120,
    "RecordScanInfo": 96,
}
