"""ctypes binding of libfoundry's C ABI (csrc/include/foundry.h).

The library may already be in the process as the LD_PRELOAD interposer; then that very copy must be
used, because the region and the registry live in its memory. Otherwise it is loaded from the
package, and Foundry can still read archives and drive the GPU, but nothing is being recorded.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from foundry.errors import (
    DriverError,
    InterposerNotLoadedError,
    KernelNotFoundError,
    ParamIntrospectionError,
    RegionBaseTakenError,
    RegionFullError,
    RegionStateError,
    UnsupportedNodeError,
)

__all__ = [
    "ABI_VERSION",
    "FDY",
    "AllocEvent",
    "ImageInfo",
    "Lib",
    "RegionInfo",
    "check",
    "library_path",
    "native",
    "preload_env",
    "require_interposer",
]

ABI_VERSION = 3
LIB_NAME = "libfoundry.so"


class FDY:
    """Foundry's own error codes (foundry.h)."""

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


_CODE_ERRORS: dict[int, type[DriverError]] = {
    FDY.REGION_STATE: RegionStateError,
    FDY.BASE_TAKEN: RegionBaseTakenError,
    FDY.REGION_FULL: RegionFullError,
    FDY.UNSUPPORTED: UnsupportedNodeError,
    FDY.NOT_FOUND: KernelNotFoundError,
    FDY.NO_PARAM_INFO: ParamIntrospectionError,
}


class RegionInfo(ctypes.Structure):
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
        ("pad", ctypes.c_int32),
    ]


class AllocEvent(ctypes.Structure):
    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("span", ctypes.c_uint64),
        ("kind", ctypes.c_uint32),
        ("tid", ctypes.c_uint32),
    ]


class ImageInfo(ctypes.Structure):
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


_u64 = ctypes.c_uint64
_size = ctypes.c_size_t
_int = ctypes.c_int
_p = ctypes.c_void_p
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "fdy_abi_version": (_int, []),
    "fdy_interposer_active": (_int, []),
    "fdy_last_error": (ctypes.c_char_p, []),
    "fdy_error_log_read": (_u64, [_u64, ctypes.c_char_p, _size]),
    "fdy_driver_open": (_int, []),
    "fdy_driver_symbol": (_p, [ctypes.c_char_p]),
    "fdy_region_set": (_int, [_u64, _u64]),
    "fdy_region_hold": (_int, [_u64, _u64]),
    "fdy_region_stop": (_int, []),
    "fdy_region_resume": (_int, []),
    "fdy_region_release": (_int, []),
    "fdy_region_info_get": (_int, [ctypes.POINTER(RegionInfo)]),
    "fdy_region_set_cursor": (_int, [_u64]),
    "fdy_region_preallocate": (_int, [_u64]),
    "fdy_region_free_preallocated": (_int, []),
    "fdy_region_map_range": (_int, [_u64, _u64]),
    "fdy_region_events": (_size, [_size, ctypes.POINTER(AllocEvent), _size]),
    "fdy_registry_count": (_size, []),
    "fdy_registry_get": (_int, [_size, ctypes.POINTER(ImageInfo)]),
    "fdy_registry_resolve": (_int, [_u64, ctypes.POINTER(_size), ctypes.c_char_p, _size]),
    "fdy_registry_entries": (_int, [_size, ctypes.c_char_p, _size, ctypes.POINTER(_size)]),
    "fdy_image_load": (_int, [_p, _u64, ctypes.c_char_p, ctypes.POINTER(_size)]),
    "fdy_image_function": (_int, [_size, ctypes.c_char_p, ctypes.POINTER(_u64)]),
    "fdy_launch_trace": (None, [_int]),
    "fdy_launch_trace_read": (_size, [ctypes.POINTER(_u64), _size]),
    "fdy_func_attr_ids": (None, [ctypes.POINTER(ctypes.c_int32)]),
    "fdy_func_get_attrs": (_int, [_u64, ctypes.POINTER(ctypes.c_int32)]),
    "fdy_func_set_attrs": (_int, [_u64, ctypes.POINTER(ctypes.c_int32)]),
    "fdy_graph_extract": (
        _int,
        [_u64, ctypes.POINTER(_p), ctypes.POINTER(_size), ctypes.POINTER(ctypes.POINTER(_u64)), ctypes.POINTER(_size)],
    ),
    "fdy_graph_build": (
        _int,
        [_p, _size, ctypes.POINTER(_u64), _size, ctypes.POINTER(_u64), ctypes.POINTER(_u64), _size],
    ),
    "fdy_overrides_apply": (_int, [_u64, _int, ctypes.POINTER(_u64), _size, _p, _size, ctypes.POINTER(_u64), _size]),
    "fdy_delta_indices": (
        _int,
        [_p, _size, _size, ctypes.POINTER(ctypes.c_uint32), _size, ctypes.POINTER(_size)],
    ),
    "fdy_delta_from_record": (
        _int,
        [_p, _size, ctypes.POINTER(ctypes.c_uint32), _size, ctypes.POINTER(_p), ctypes.POINTER(_size)],
    ),
    "fdy_graph_instantiate": (_int, [_u64, _u64, ctypes.POINTER(_u64)]),
    "fdy_graph_launch": (_int, [_u64, _u64]),
    "fdy_graph_destroy": (_int, [_u64]),
    "fdy_graph_exec_destroy": (_int, [_u64]),
    "fdy_free": (None, [_p]),
    "fdy_heap_warm": (_p, [_size]),
    "fdy_heap_release": (None, [_p]),
}


class Lib:
    """The loaded library with typed entry points (attribute access returns the ctypes function)."""

    def __init__(self, handle: ctypes.CDLL, path: str, preloaded: bool) -> None:
        self.handle = handle
        self.path = path
        self.preloaded = preloaded
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        version = self.fdy_abi_version()
        if version != ABI_VERSION:
            raise DriverError(
                f"{path} has C ABI version {version}, this Python package expects {ABI_VERSION}: the native "
                "library and the package come from different builds. Reinstall Foundry (pip install .)."
            )

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not bound in __init__; typed as Any so that callers of the bound
        # ctypes functions need no casts.
        raise AttributeError(name)

    def last_error(self) -> str:
        msg = self.fdy_last_error()
        return msg.decode(errors="replace") if msg else ""

    def recent_error(self, after: int = 0) -> tuple[int, str]:
        """The newest message any thread recorded after sequence number ``after``."""
        buf = ctypes.create_string_buffer(1024)
        seq = int(self.fdy_error_log_read(after, buf, len(buf)))
        return seq, buf.value.decode(errors="replace") if seq else ""


def library_path() -> Path:
    """Where the library to preload lives: $FOUNDRY_LIB, the package, or a development build."""
    env = os.environ.get("FOUNDRY_LIB")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    candidates = [here / LIB_NAME]
    # An editable install keeps the built library in site-packages, away from the sources.
    candidates += [Path(p) / "foundry" / LIB_NAME for p in sys.path if p and Path(p).is_dir()]
    root = here.parent
    candidates += sorted(root.glob(f"build/*/{LIB_NAME}"))
    for path in candidates:
        if path.is_file():
            return path
    raise DriverError(
        f"{LIB_NAME} was not found (looked at $FOUNDRY_LIB and {', '.join(str(c) for c in candidates[:2])}). "
        "Build it with `pip install .`, or point FOUNDRY_LIB at it."
    )


def preload_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with libfoundry first in LD_PRELOAD."""
    out = dict(os.environ if env is None else env)
    lib = str(library_path())
    rest = [p for p in out.get("LD_PRELOAD", "").split(":") if p and p != lib]
    out["LD_PRELOAD"] = ":".join([lib, *rest])
    return out


@lru_cache(maxsize=1)
def native() -> Lib:
    """The process's libfoundry: the preloaded copy if there is one."""
    global_scope = ctypes.CDLL(None)
    if hasattr(global_scope, "fdy_abi_version"):
        preloaded = Lib(global_scope, "<preloaded>", preloaded=True)
        if preloaded.fdy_interposer_active():
            return preloaded
    path = library_path()
    return Lib(ctypes.CDLL(str(path)), str(path), preloaded=False)


def check(rc: int, what: str, default: type[DriverError] = DriverError) -> None:
    """Raises the exception matching a failed call's return code, with the library's message."""
    if rc == 0:
        return
    lib = native()
    message = lib.last_error() or f"{what} failed with code {rc}"
    cls = _CODE_ERRORS.get(rc, default)
    raise cls(message, rc)


def require_interposer(action: str) -> Lib:
    """The library, when it is preloaded; otherwise a clear error saying how to start the program."""
    lib = native()
    if not lib.preloaded:
        raise InterposerNotLoadedError(
            f"{action} needs Foundry's interposer, which is not loaded in this process. Start the program "
            f"with `foundry run -- python your_app.py`, or set LD_PRELOAD={library_path()} before CUDA starts."
        )
    return lib
