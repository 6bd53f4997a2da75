"""libfoundry's C ABI and the CUDA driver, seen from Python: the library (``lib``), the few driver
calls Python makes itself (``driver``), the graph codec's entry points (``codec``) and this machine's
identity (``machine``). Everything else in Foundry reaches native code through this surface."""

from __future__ import annotations

from . import codec
from ._abi import AllocKind, ImageKind
from ._abi import ImageFormat as NativeImageFormat
from .driver import (
    call,
    current_context,
    current_device,
    device_identity,
    driver_version,
    library_load,
    library_unload,
    memcpy_dtoh,
    memcpy_htod,
    module_global,
    set_nodes_enabled,
    work_nodes,
)
from .lib import (
    ABI_VERSION,
    AllocEvent,
    ErrorCode,
    ImageInfo,
    Lib,
    RegionInfo,
    check,
    library_path,
    native,
    preload_env,
    require_interposer,
)
from .machine import current_identity

__all__ = [
    "ABI_VERSION",
    "AllocEvent",
    "AllocKind",
    "ErrorCode",
    "ImageInfo",
    "ImageKind",
    "Lib",
    "NativeImageFormat",
    "RegionInfo",
    "call",
    "check",
    "codec",
    "current_context",
    "current_device",
    "current_identity",
    "device_identity",
    "driver_version",
    "library_load",
    "library_path",
    "library_unload",
    "memcpy_dtoh",
    "memcpy_htod",
    "module_global",
    "native",
    "preload_env",
    "require_interposer",
    "set_nodes_enabled",
    "work_nodes",
]
