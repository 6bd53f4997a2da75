"""The handful of driver calls Python makes itself, through the real driver entry points that
libfoundry resolved (never through hooks)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from typing import Any

from foundry.errors import DriverError

from ._abi import DeviceAttr
from ._signatures import DRIVER_SIGNATURES
from .lib import check, native

__all__ = [
    "context_synchronize",
    "current_context",
    "current_device",
    "device_identity",
    "device_location",
    "driver_init",
    "driver_version",
    "exec_update",
    "graph_upload",
    "library_load",
    "library_unload",
    "memcpy_dtoh",
    "memcpy_htod",
    "memcpy_htod_from",
    "module_function",
    "module_globals",
    "module_load",
    "set_current_context",
    "visible_device",
]


@cache
def _fn(name: str) -> Any:
    lib = native()
    check = lib.fdy_driver_open()
    if check != 0:
        raise DriverError(lib.last_error(), check)
    address = lib.fdy_driver_symbol(name.encode())
    if not address:
        raise DriverError(f"the CUDA driver has no entry point {name}: a newer NVIDIA driver is needed")
    fn = ctypes.CFUNCTYPE(ctypes.c_int, *DRIVER_SIGNATURES[name])(address)
    return fn


def error_name(code: int) -> str:
    name = ctypes.c_char_p()
    if _fn("cuGetErrorName")(code, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUDA error {code}"


def call(name: str, *args: Any) -> None:
    """Calls a driver entry point and raises DriverError naming it on failure."""
    rc = _fn(name)(*args)
    if rc != 0:
        raise DriverError(f"{name} failed with {error_name(rc)} ({rc})", rc)


def current_device() -> int:
    dev = ctypes.c_int()
    call("cuCtxGetDevice", ctypes.byref(dev))
    return dev.value


def set_current_context(context: int) -> None:
    """Makes ``context`` current on the calling thread (a thread LOAD starts works in the caller's)."""
    call("cuCtxSetCurrent", context)


def context_synchronize() -> None:
    call("cuCtxSynchronize")


def driver_init() -> None:
    call("cuInit", 0)


def visible_device(ordinal: int) -> int:
    """The CUdevice of visible device ``ordinal`` (after driver_init)."""
    dev = ctypes.c_int()
    call("cuDeviceGet", ctypes.byref(dev), ordinal)
    return dev.value


def graph_upload(exec_: int, stream: int) -> None:
    call("cuGraphUpload", exec_, stream)


def exec_update(exec_: int, graph: int) -> None:
    """Updates ``exec_`` whole to ``graph``'s parameters (cuGraphExecUpdate); raises DriverError if refused."""
    # Room for the driver's CUgraphExecUpdateResultInfo (24 bytes in cuda.h; the driver may refuse a null
    # one). Its contents are not read: every caller treats any refusal alike.
    info = ctypes.create_string_buffer(64)
    call("cuGraphExecUpdate_v2", exec_, graph, info)


def module_load(image: bytes) -> tuple[int, object]:
    """(CUmodule, the buffer to keep alive with it) of an image loaded with cuModuleLoadData."""
    buf = ctypes.create_string_buffer(image, len(image))
    handle = ctypes.c_void_p()
    call("cuModuleLoadData", ctypes.byref(handle), buf)
    return handle.value or 0, buf


def module_function(module: int, name: str) -> int:
    fn = ctypes.c_void_p()
    call("cuModuleGetFunction", ctypes.byref(fn), module, name.encode())
    return fn.value or 0


def current_context() -> int:
    """The calling thread's current CUcontext (threads started later must make it current)."""
    ctx = ctypes.c_void_p()
    call("cuCtxGetCurrent", ctypes.byref(ctx))
    if not ctx.value:
        raise DriverError("no CUDA context is current on this thread: initialise CUDA first (torch.cuda.init())")
    return ctx.value


def driver_version() -> int:
    v = ctypes.c_int()
    call("cuDriverGetVersion", ctypes.byref(v))
    return v.value


def device_identity(device: int) -> tuple[str, int, tuple[int, int]]:
    """(name, multiprocessor count, compute capability) of a device."""
    buf = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", buf, len(buf), device)
    values = []
    for attr in (
        DeviceAttr.MULTIPROCESSOR_COUNT,
        DeviceAttr.COMPUTE_CAPABILITY_MAJOR,
        DeviceAttr.COMPUTE_CAPABILITY_MINOR,
    ):
        v = ctypes.c_int()
        call("cuDeviceGetAttribute", ctypes.byref(v), attr, device)
        values.append(v.value)
    return buf.value.decode(errors="replace"), values[0], (values[1], values[2])


def device_location(device: int) -> tuple[str, str]:
    """(PCI bus id, UUID as 32 hex digits) of a device: which GPU of the machine it is."""
    bus = ctypes.create_string_buffer(64)
    call("cuDeviceGetPCIBusId", bus, len(bus), device)
    uuid = ctypes.create_string_buffer(16)
    call("cuDeviceGetUuid_v2", uuid, device)
    return bus.value.decode(errors="replace"), uuid.raw.hex()


def memcpy_dtoh(src: int, n: int) -> bytes:
    buf = ctypes.create_string_buffer(n)
    call("cuMemcpyDtoH_v2", buf, src, n)
    return buf.raw


def memcpy_htod(dst: int, data: bytes | bytearray) -> None:
    buf = ctypes.create_string_buffer(bytes(data), len(data))
    call("cuMemcpyHtoD_v2", dst, buf, len(data))


def memcpy_htod_from(dst: int, data: bytearray, start: int, size: int) -> None:
    """Copies ``data[start:start + size]`` to device address ``dst`` without copying it on the host first."""
    if start < 0 or size < 0 or start + size > len(data):
        raise ValueError(f"bytes {start}..{start + size} lie outside the {len(data)}-byte buffer")
    buf = (ctypes.c_char * len(data)).from_buffer(data)
    call("cuMemcpyHtoD_v2", dst, ctypes.c_void_p(ctypes.addressof(buf) + start), size)


def module_globals(
    handle: int, library: bool, names: Sequence[str], managed: Sequence[bool]
) -> list[tuple[int, int] | None]:
    """(device address, size in bytes) of each module variable ``names[i]`` in a loaded CUmodule, or in a
    CUlibrary (``library``) for the current context, in one native call; None where the driver finds no
    variable of that name (CUDA_ERROR_NOT_FOUND: the image's code for this device does not define it). A
    library's variable with ``managed[i]`` set is asked of cuLibraryGetManaged when cuLibraryGetGlobal does
    not know it. Raises DriverError naming the variable on any other failure."""
    n = len(names)
    if len(managed) != n:
        raise ValueError(f"module_globals: {n} names but {len(managed)} managed flags")
    keep = [name.encode() for name in names]
    c_names = (ctypes.c_char_p * n)(*keep)
    flags = bytes(1 if m else 0 for m in managed)
    addresses, sizes = (ctypes.c_uint64 * n)(), (ctypes.c_uint64 * n)()
    done = ctypes.c_size_t()
    rc = native().fdy_module_globals(
        handle, int(library), n, ctypes.cast(c_names, ctypes.POINTER(ctypes.POINTER(ctypes.c_char))), flags,
        addresses, sizes, ctypes.byref(done),
    )  # fmt: skip
    check(rc, "module variable lookup")
    return [(addresses[i], sizes[i]) if addresses[i] else None for i in range(n)]


def library_load(image: int) -> int:
    """A CUlibrary of the image at address ``image``, loaded with no options, straight from the driver
    (not recorded by the interposer); the caller unloads it with library_unload."""
    handle = ctypes.c_void_p()
    call("cuLibraryLoadData", ctypes.byref(handle), image, None, None, 0, None, None, 0)
    return handle.value or 0


def library_unload(handle: int) -> None:
    call("cuLibraryUnload", handle)
