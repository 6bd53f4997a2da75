"""Generated from csrc/include/foundry.h by scripts/gen_abi.py: do not edit.

Regenerate with `python scripts/gen_abi.py` after changing the header; CI checks that this file is
what the header gives."""

from __future__ import annotations

import ctypes
from typing import Any

from ._abi import AllocEvent, ImageInfo, ImportMapping, ImportsSummary, ReadReport, RecordScanInfo, RegionInfo


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
    "fdy_region_driver_room": (ctypes.c_int, [_ptr(ctypes.c_uint64, 1)]),
    "fdy_region_open_pack": (ctypes.c_int, [ctypes.c_uint64]),
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
