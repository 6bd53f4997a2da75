"""Generated from csrc/include/foundry.h by scripts/gen_abi.py: do not edit.

Regenerate with `python scripts/gen_abi.py` after changing the header; CI checks that this file is
what the header gives."""

from __future__ import annotations

import ctypes
from enum import IntEnum
from typing import Any

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


def _ptr(base: Any, depth: int) -> Any:
    for _ in range(depth):
        base = ctypes.POINTER(base)
    return base


# name -> (restype, argtypes) of every exported function
SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "fdy_abi_version": (ctypes.c_int, []),
    "fdy_interposer_active": (ctypes.c_int, []),
    "fdy_last_error": (ctypes.c_char_p, []),
    "fdy_error_log_read": (ctypes.c_uint64, [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t]),
    "fdy_driver_open": (ctypes.c_int, []),
    "fdy_driver_symbol": (ctypes.c_void_p, [ctypes.c_char_p]),
    "fdy_device_read": (
        ctypes.c_int,
        [_ptr(ctypes.c_uint64, 1), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, _ptr(ReadReport, 1)],
    ),
    "fdy_imports_live": (ctypes.c_uint64, []),
    "fdy_imports_summary_get": (ctypes.c_int, [_ptr(ImportsSummary, 1)]),
    "fdy_imports_mappings": (ctypes.c_size_t, [_ptr(ImportMapping, 1), ctypes.c_size_t]),
    "fdy_region_set": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64]),
    "fdy_region_hold": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64]),
    "fdy_region_stop": (ctypes.c_int, []),
    "fdy_region_resume": (ctypes.c_int, []),
    "fdy_region_release": (ctypes.c_int, []),
    "fdy_region_info_get": (ctypes.c_int, [_ptr(RegionInfo, 1)]),
    "fdy_region_set_cursor": (ctypes.c_int, [ctypes.c_uint64]),
    "fdy_region_preallocate": (ctypes.c_int, [ctypes.c_uint64]),
    "fdy_region_free_preallocated": (ctypes.c_int, []),
    "fdy_region_map_range": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64]),
    "fdy_region_events": (ctypes.c_size_t, [ctypes.c_size_t, _ptr(AllocEvent, 1), ctypes.c_size_t]),
    "fdy_registry_count": (ctypes.c_size_t, []),
    "fdy_registry_get": (ctypes.c_int, [ctypes.c_size_t, _ptr(ImageInfo, 1)]),
    "fdy_registry_entries": (
        ctypes.c_int,
        [ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, _ptr(ctypes.c_size_t, 1)],
    ),
    "fdy_image_load": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, _ptr(ctypes.c_size_t, 1)]),
    "fdy_image_function": (ctypes.c_int, [ctypes.c_size_t, ctypes.c_char_p, _ptr(ctypes.c_uint64, 1)]),
    "fdy_image_load_many": (
        ctypes.c_int,
        [
            ctypes.c_size_t,
            _ptr(ctypes.c_uint64, 1),
            _ptr(ctypes.c_uint64, 1),
            _ptr(ctypes.c_char, 2),
            _ptr(ctypes.c_size_t, 1),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_image_functions": (
        ctypes.c_int,
        [
            ctypes.c_size_t,
            _ptr(ctypes.c_size_t, 1),
            _ptr(ctypes.c_char, 2),
            _ptr(ctypes.c_uint64, 1),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_module_globals": (
        ctypes.c_int,
        [
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.c_size_t,
            _ptr(ctypes.c_char, 2),
            ctypes.c_char_p,
            _ptr(ctypes.c_uint64, 1),
            _ptr(ctypes.c_uint64, 1),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_launch_trace": (None, [ctypes.c_int]),
    "fdy_launch_trace_read": (ctypes.c_size_t, [_ptr(ctypes.c_uint64, 1), ctypes.c_size_t]),
    "fdy_loaded_objects": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
    "fdy_func_get_attrs": (ctypes.c_int, [ctypes.c_uint64, _ptr(ctypes.c_int32, 1)]),
    "fdy_functions_describe": (
        ctypes.c_int,
        [
            ctypes.c_size_t,
            _ptr(ctypes.c_uint64, 1),
            _ptr(ctypes.c_size_t, 1),
            _ptr(ctypes.c_int32, 1),
            ctypes.c_char_p,
            ctypes.c_size_t,
            _ptr(ctypes.c_size_t, 1),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_func_set_attrs": (ctypes.c_int, [ctypes.c_uint64, _ptr(ctypes.c_int32, 1)]),
    "fdy_record_scan": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            _ptr(RecordScanInfo, 1),
            _ptr(ctypes.c_uint64, 2),
            _ptr(ctypes.c_uint32, 2),
            _ptr(ctypes.c_uint8, 2),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_record_compare": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            _ptr(ctypes.c_uint32, 1),
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_size_t,
            _ptr(ctypes.c_uint32, 1),
            ctypes.c_size_t,
            _ptr(ctypes.c_uint32, 2),
            _ptr(ctypes.c_size_t, 1),
            _ptr(ctypes.c_int64, 1),
            _ptr(ctypes.c_int, 1),
        ],
    ),
    "fdy_graph_extract": (
        ctypes.c_int,
        [
            ctypes.c_uint64,
            _ptr(ctypes.c_void_p, 1),
            _ptr(ctypes.c_size_t, 1),
            _ptr(ctypes.c_uint64, 2),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_graph_build": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            _ptr(ctypes.c_uint64, 1),
            ctypes.c_size_t,
            _ptr(ctypes.c_uint64, 1),
            _ptr(ctypes.c_uint64, 1),
            ctypes.c_size_t,
        ],
    ),
    "fdy_overrides_apply": (
        ctypes.c_int,
        [
            ctypes.c_uint64,
            ctypes.c_int,
            _ptr(ctypes.c_uint64, 1),
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_size_t,
            _ptr(ctypes.c_uint64, 1),
            ctypes.c_size_t,
        ],
    ),
    "fdy_delta_check": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, _ptr(ctypes.c_uint64, 1), ctypes.c_size_t],
    ),
    "fdy_delta_indices": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            _ptr(ctypes.c_uint32, 1),
            ctypes.c_size_t,
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_delta_from_record": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            _ptr(ctypes.c_uint32, 1),
            ctypes.c_size_t,
            ctypes.c_char_p,
            _ptr(ctypes.c_void_p, 1),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_graph_work_enable": (
        ctypes.c_int,
        [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int],
    ),
    "fdy_record_pointed_words": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            _ptr(ctypes.c_uint64, 1),
            ctypes.c_size_t,
            _ptr(ctypes.c_uint64, 2),
            _ptr(ctypes.c_size_t, 1),
        ],
    ),
    "fdy_graph_instantiate": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64, _ptr(ctypes.c_uint64, 1)]),
    "fdy_graph_upload_wait": (ctypes.c_int, [ctypes.c_uint64]),
    "fdy_graph_launch": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64]),
    "fdy_graph_launch_drop": (ctypes.c_uint32, [ctypes.c_uint64]),
    "fdy_hook_handed_out": (ctypes.c_int, [ctypes.c_char_p]),
    "fdy_graph_destroy": (ctypes.c_int, [ctypes.c_uint64]),
    "fdy_graph_exec_destroy": (ctypes.c_int, [ctypes.c_uint64]),
    "fdy_free": (None, [ctypes.c_void_p]),
    "fdy_heap_warm": (ctypes.c_void_p, [ctypes.c_size_t]),
    "fdy_heap_release": (None, [ctypes.c_void_p]),
}


# name -> ctypes argument types of each driver entry point Python calls (cuda.h; returns CUresult)
DRIVER_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuCtxGetDevice": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "cuCtxGetCurrent": [ctypes.POINTER(ctypes.c_void_p)],
    "cuCtxSetCurrent": [ctypes.c_void_p],
    "cuCtxSynchronize": [],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuMemcpyDtoH_v2": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t],
    "cuMemcpyHtoD_v2": [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t],
    "cuGraphUpload": [ctypes.c_void_p, ctypes.c_void_p],
    "cuGraphExecUpdate_v2": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p],
    "cuLibraryLoadData": [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_uint,
    ],
    "cuLibraryUnload": [ctypes.c_void_p],
    "cuLibraryGetGlobal": [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,
        ctypes.c_char_p,
    ],
    "cuLibraryGetManaged": [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,
        ctypes.c_char_p,
    ],
    "cuModuleGetGlobal_v2": [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,
        ctypes.c_char_p,
    ],
    "cuModuleLoadData": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p],
    "cuModuleGetFunction": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p],
    "cuDeviceGetPCIBusId": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetUuid_v2": [ctypes.c_void_p, ctypes.c_int],
}
