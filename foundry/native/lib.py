"""ctypes binding of libfoundry's C ABI (csrc/include/foundry.h; its constants, structs and function
signatures are generated into ``_abi``).

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

from ._abi import ABI_VERSION, AllocEvent, ErrorCode, ImageInfo, RegionInfo
from ._signatures import SIGNATURES

__all__ = [
    "ABI_VERSION",
    "AllocEvent",
    "ErrorCode",
    "ImageInfo",
    "Lib",
    "RegionInfo",
    "check",
    "hook_handed_out",
    "library_path",
    "native",
    "preload_env",
    "require_interposer",
]

LIB_NAME = "libfoundry.so"

_CODE_ERRORS: dict[int, type[DriverError]] = {
    ErrorCode.REGION_STATE: RegionStateError,
    ErrorCode.BASE_TAKEN: RegionBaseTakenError,
    ErrorCode.REGION_FULL: RegionFullError,
    ErrorCode.UNSUPPORTED: UnsupportedNodeError,
    ErrorCode.NOT_FOUND: KernelNotFoundError,
    ErrorCode.NO_PARAM_INFO: ParamIntrospectionError,
}


class Lib:
    """The loaded library with typed entry points (attribute access returns the ctypes function)."""

    def __init__(self, handle: ctypes.CDLL, path: str, preloaded: bool) -> None:
        self.handle = handle
        self.path = path
        self.preloaded = preloaded
        for name, (restype, argtypes) in SIGNATURES.items():
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
    error = failure(rc, what, default)
    if error is not None:
        raise error


def failure(rc: int, what: str, default: type[DriverError] = DriverError) -> DriverError | None:
    """The exception ``check`` raises for a call's return code (None for success), for a caller that must
    finish its own bookkeeping before it raises."""
    if rc == 0:
        return None
    lib = native()
    message = lib.last_error() or f"{what} failed with code {rc}"
    return _CODE_ERRORS.get(rc, default)(message, rc)


def require_interposer(action: str) -> Lib:
    """The library, when it is preloaded; otherwise a clear error saying how to start the program."""
    lib = native()
    if not lib.preloaded:
        raise InterposerNotLoadedError(
            f"{action} needs Foundry's interposer, which is not loaded in this process. Start the program "
            f"with `foundry run -- python your_app.py`, or set LD_PRELOAD={library_path()} before CUDA starts."
        )
    return lib


def hook_handed_out(symbol: str) -> bool:
    """Whether any caller in this process got the interposer's hook for driver entry point ``symbol`` (by
    dlsym or cuGetProcAddress): the CUDA runtime looks its entry points up once, when it starts."""
    return bool(native().fdy_hook_handed_out(symbol.encode()))
