"""libfoundry's kernel-image registry (csrc/registry.c, csrc/image.c), typed: the images the interposer
recorded, CUfunction -> (image, name), LOAD's image loads and kernel lookups, the per-function
attributes a function table records, and the trace of eager launches."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from foundry.errors import DriverError, KernelNotFoundError, RegistryError
from foundry.records import FuncAttr, FuncAttrs

from ._abi import ErrorCode, ImageFormat, ImageInfo, ImageKind
from .lib import check, failure, native

__all__ = [
    "FunctionInfo",
    "ImageRecord",
    "describe_functions",
    "function_attrs",
    "image_entries",
    "image_functions",
    "image_view",
    "launch_trace_read",
    "launch_trace_set",
    "load_images",
    "registry_count",
    "registry_image",
    "set_function_attrs",
]

_MAX_NAMES = 1 << 28  # kernel names taking more than this are damage, not a graph's kernels


@dataclass(frozen=True)
class ImageRecord:
    """One image the registry holds: its driver handle, where its bytes are, and what it is."""

    index: int
    handle: int
    data: int
    size: int
    kind: str  # "module" or "library"
    format: ImageFormat
    owned: bool
    loaded: bool
    restored: bool
    hash: str  # content hash when the registry knows it (images LOAD loaded), else ""


def registry_count() -> int:
    return int(native().fdy_registry_count())


def registry_image(index: int) -> ImageRecord:
    """The registry's record of image ``index``."""
    info = ImageInfo()
    check(native().fdy_registry_get(index, ctypes.byref(info)), "registry lookup", RegistryError)
    return ImageRecord(
        index, info.handle, info.data, info.size, "module" if info.kind == ImageKind.MODULE else "library",
        ImageFormat(info.format), bool(info.owned), bool(info.loaded), bool(info.restored),
        info.hash.decode() if info.hash else "",
    )  # fmt: skip


def image_view(record: ImageRecord) -> memoryview:
    """A zero-copy view of a recorded image's bytes (valid while the image stays loaded)."""
    return memoryview((ctypes.c_char * record.size).from_address(record.data)).cast("B")


@dataclass(frozen=True)
class FunctionInfo:
    """What SAVE records of a CUfunction: its image's registry index, mangled name and attributes."""

    image: int
    name: str
    attrs: FuncAttrs


def describe_functions(functions: Sequence[int]) -> list[FunctionInfo]:
    """Every CUfunction's image, name and attributes, in one native call (a graph launches a hundred
    kernels, and SAVE asks at every save: a program may raise an attribute between two captures). The
    first function not in the registry raises KernelNotFoundError."""
    count = len(functions)
    c_functions = (ctypes.c_uint64 * max(count, 1))(*functions)
    indices = (ctypes.c_size_t * max(count, 1))()
    attrs = (ctypes.c_int32 * max(count * len(FuncAttr), 1))()
    needed, done = ctypes.c_size_t(), ctypes.c_size_t()
    cap = 256 * count
    while True:
        names = ctypes.create_string_buffer(max(cap, 1))
        rc = native().fdy_functions_describe(
            count, c_functions, indices, attrs, names, len(names), ctypes.byref(needed), ctypes.byref(done)
        )
        # Mangled names of templated kernels can be longer than any guess: the native side says how many
        # bytes all of them take, and they are asked for again in a buffer that large.
        if rc != ErrorCode.TRUNCATED or needed.value > _MAX_NAMES:
            break
        cap = needed.value
    check(rc, "resolve", KernelNotFoundError)
    split = names.raw[: needed.value].split(b"\0")
    width = len(FuncAttr)
    return [
        FunctionInfo(indices[i], split[i].decode(), FuncAttrs._make(attrs[i * width : (i + 1) * width]))
        for i in range(count)
    ]


def image_entries(index: int) -> list[str]:
    """Mangled names of the kernels in a loaded image, as the driver enumerates them."""
    lib = native()
    needed = ctypes.c_size_t()
    lib.fdy_registry_entries(index, None, 0, ctypes.byref(needed))
    buf = ctypes.create_string_buffer(max(needed.value, 1))
    check(lib.fdy_registry_entries(index, buf, len(buf), ctypes.byref(needed)), "image entries", RegistryError)
    return [n.decode() for n in buf.raw[: needed.value].split(b"\0") if n]


def load_images(items: Sequence[tuple[bytearray, str]]) -> tuple[list[tuple[int, object]], DriverError | None]:
    """Loads images into the driver as CUlibraries and registers them, in one native call (the interpreter lock
    let go once for them all): (registry index, what must stay alive as long as the library does: the driver is
    told it may keep reading the bytes) of each image loaded, in order, and the error that stopped the rest, or
    None. The images loaded before an error stay loaded, so the caller registers them either way."""
    n = len(items)
    bufs = [(ctypes.c_char * len(data)).from_buffer(data) for data, _ in items]
    datas = (ctypes.c_uint64 * n)(*(ctypes.addressof(b) for b in bufs))
    sizes = (ctypes.c_uint64 * n)(*(len(data) for data, _ in items))
    hashes = (ctypes.c_char_p * n)(*(sha.encode() for _, sha in items))
    indices = (ctypes.c_size_t * n)()
    done = ctypes.c_size_t()
    names = ctypes.cast(hashes, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)))
    rc = native().fdy_image_load_many(n, datas, sizes, names, indices, ctypes.byref(done))
    return [(indices[i], bufs[i]) for i in range(done.value)], failure(rc, "load image", RegistryError)


def image_functions(kernels: Sequence[tuple[int, str]]) -> tuple[list[int], DriverError | None]:
    """The CUfunctions of kernels (registry index of the image LOAD loaded, mangled name), in one native call:
    those looked up, in order, and the error that stopped the rest, or None."""
    n = len(kernels)
    indices = (ctypes.c_size_t * n)(*(i for i, _ in kernels))
    names = (ctypes.c_char_p * n)(*(name.encode() for _, name in kernels))
    out = (ctypes.c_uint64 * n)()
    done = ctypes.c_size_t()
    rc = native().fdy_image_functions(
        n, indices, ctypes.cast(names, ctypes.POINTER(ctypes.POINTER(ctypes.c_char))), out, ctypes.byref(done)
    )
    return list(out[: done.value]), failure(rc, "kernel lookup", KernelNotFoundError)


def function_attrs(function: int) -> FuncAttrs:
    values = (ctypes.c_int32 * len(FuncAttr))()
    check(native().fdy_func_get_attrs(function, values), "cuFuncGetAttribute")
    return FuncAttrs._make(values)


def set_function_attrs(function: int, attrs: Iterable[int]) -> None:
    values = (ctypes.c_int32 * len(FuncAttr))(*attrs)
    check(native().fdy_func_set_attrs(function, values), "cuFuncSetAttribute")


def launch_trace_set(on: bool) -> None:
    """Starts or stops recording every CUfunction launched eagerly (cuLaunchKernel, cuLaunchKernelEx, ...)."""
    native().fdy_launch_trace(int(on))


def launch_trace_read() -> list[int]:
    lib = native()
    n = lib.fdy_launch_trace_read(None, 0)
    buf = (ctypes.c_uint64 * n)()
    n = lib.fdy_launch_trace_read(buf, n)
    return list(buf[:n])
