"""libfoundry's C ABI and the CUDA driver, seen from Python, as typed functions: the allocation region
(``region``), the kernel-image registry (``registry``), the few driver calls Python makes itself
(``driver``), device memory read in many spans at once (``copies``), the graph codec's entry points
(``codec``), graph records checked and compared without parsing them in Python (``records``) and this
machine's identity (``machine``).
The library object and ctypes stay in here (``lib``): everything else in Foundry reaches native code
through this surface, and tests/cpu/test_layering.py checks that no other package imports ctypes."""

from __future__ import annotations

from . import codec
from ._abi import AllocKind
from ._abi import ImageFormat as NativeImageFormat
from .copies import DeviceRead, ReadPath, read_device
from .driver import (
    context_synchronize,
    current_context,
    exec_update,
    graph_upload,
    library_load,
    library_unload,
    memcpy_dtoh,
    memcpy_htod,
    memcpy_htod_from,
    module_function,
    module_globals,
    module_load,
    set_current_context,
)
from .imports import ImportedMapping, OpenImports, open_imports
from .lib import hook_handed_out, preload_env, require_interposer
from .machine import current_device_place, current_identity, device_zero_identity
from .records import RecordComparison, RecordScan, compare_records, scan_record
from .region import (
    heap_release,
    heap_warm,
    imports_live,
    interposer_loaded,
    region_event_count,
    region_events,
    region_free_preallocated,
    region_hold,
    region_info,
    region_map_range,
    region_preallocate,
    region_release,
    region_resume,
    region_set,
    region_set_cursor,
    region_stop,
)
from .registry import (
    FunctionInfo,
    ImageRecord,
    describe_functions,
    function_attrs,
    image_entries,
    image_functions,
    image_view,
    launch_trace_read,
    launch_trace_set,
    load_images,
    registry_count,
    registry_image,
    set_function_attrs,
)

__all__ = [
    "AllocKind",
    "DeviceRead",
    "FunctionInfo",
    "ImageRecord",
    "ImportedMapping",
    "NativeImageFormat",
    "OpenImports",
    "ReadPath",
    "RecordComparison",
    "RecordScan",
    "codec",
    "compare_records",
    "context_synchronize",
    "current_context",
    "current_device_place",
    "current_identity",
    "describe_functions",
    "device_zero_identity",
    "exec_update",
    "function_attrs",
    "graph_upload",
    "heap_release",
    "heap_warm",
    "hook_handed_out",
    "image_entries",
    "image_functions",
    "image_view",
    "imports_live",
    "interposer_loaded",
    "launch_trace_read",
    "launch_trace_set",
    "library_load",
    "library_unload",
    "load_images",
    "memcpy_dtoh",
    "memcpy_htod",
    "memcpy_htod_from",
    "module_function",
    "module_globals",
    "module_load",
    "open_imports",
    "preload_env",
    "read_device",
    "region_event_count",
    "region_events",
    "region_free_preallocated",
    "region_hold",
    "region_info",
    "region_map_range",
    "region_preallocate",
    "region_release",
    "region_resume",
    "region_set",
    "region_set_cursor",
    "region_stop",
    "registry_count",
    "registry_image",
    "require_interposer",
    "scan_record",
    "set_current_context",
    "set_function_attrs",
]
