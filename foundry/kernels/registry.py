"""The kernel-image registry seen from Python.

A kernel is identified across processes by (content hash of its image, mangled entry name). SAVE
maps each CUfunction a graph uses to that pair; LOAD loads the images and maps the pair back to a
CUfunction of its own.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from foundry._state import ProcessState
from foundry.errors import KernelNotFoundError, RegistryError
from foundry.format import FUNCTION_ATTR_UNKNOWN, FuncAttr, FuncAttrs
from foundry.native import ErrorCode, ImageInfo, ImageKind, NativeImageFormat, check, native

__all__ = [
    "FUNC_ATTR_COUNT",
    "ImageFormat",
    "ImageRecord",
    "KernelRef",
    "function_attrs",
    "image_bytes",
    "image_entries",
    "image_hash",
    "image_record",
    "is_loaded",
    "launch_trace",
    "load_image",
    "loaded_function",
    "loaded_image",
    "recorded_images",
    "resolve",
    "set_function_attrs",
]

FUNC_ATTR_COUNT = len(FuncAttr)
UNKNOWN_ATTR = FUNCTION_ATTR_UNKNOWN
ImageFormat = NativeImageFormat


@dataclass(frozen=True)
class ImageRecord:
    index: int
    handle: int
    data: int
    size: int
    kind: str  # "module" or "library"
    format: ImageFormat
    owned: bool
    loaded: bool
    restored: bool


@dataclass(frozen=True)
class KernelRef:
    """A kernel's identity across processes."""

    image: str  # sha256 of the image
    name: str


@dataclass
class _Kernels:
    """SAVE: image hashes by registry index, computed once. LOAD: images loaded from archives by hash,
    the locks of images being loaded (later callers wait on them), the buffers the driver may keep
    reading, and the CUfunctions looked up, by (image hash, name)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    hashes: dict[int, str] = field(default_factory=dict)
    loaded: dict[str, int] = field(default_factory=dict)
    loading: dict[str, threading.Lock] = field(default_factory=dict)
    keepalive: list[object] = field(default_factory=list)
    functions: dict[tuple[str, str], int] = field(default_factory=dict)


_STATE = ProcessState("kernels", _Kernels)


def image_record(index: int) -> ImageRecord:
    """One recorded image."""
    info = ImageInfo()
    check(native().fdy_registry_get(index, ctypes.byref(info)), "registry lookup", RegistryError)
    return ImageRecord(
        index, info.handle, info.data, info.size, "module" if info.kind == ImageKind.MODULE else "library",
        ImageFormat(info.format), bool(info.owned), bool(info.loaded), bool(info.restored),
    )  # fmt: skip


def recorded_images() -> list[ImageRecord]:
    lib = native()
    return [image_record(i) for i in range(lib.fdy_registry_count())]


def image_bytes(index: int) -> memoryview:
    """A zero-copy view of a recorded image (valid while the image stays loaded)."""
    rec = image_record(index)
    if rec.format is ImageFormat.UNKNOWN or not rec.size or not rec.data:
        raise RegistryError(
            f"image {index} ({rec.kind} {rec.handle:#x}) has an unknown format, so its size and bytes cannot be "
            "saved; graphs using its kernels cannot be persisted"
        )
    return memoryview((ctypes.c_char * rec.size).from_address(rec.data)).cast("B")


def image_hash(index: int) -> str:
    """sha256 of a recorded image, computed once (SAVE hashes only the images graphs use)."""
    s = _STATE.get()
    with s.lock:
        cached = s.hashes.get(index)
    if cached:
        return cached
    info = ImageInfo()
    check(native().fdy_registry_get(index, ctypes.byref(info)), "registry lookup", RegistryError)
    digest = info.hash.decode() if info.hash else hashlib.sha256(image_bytes(index)).hexdigest()
    with s.lock:
        s.hashes[index] = digest
    return digest


def image_entries(index: int) -> list[str]:
    """Mangled names of the kernels in a loaded image, as the driver enumerates them."""
    lib = native()
    needed = ctypes.c_size_t()
    lib.fdy_registry_entries(index, None, 0, ctypes.byref(needed))
    buf = ctypes.create_string_buffer(max(needed.value, 1))
    check(lib.fdy_registry_entries(index, buf, len(buf), ctypes.byref(needed)), "image entries", RegistryError)
    return [n.decode() for n in buf.raw[: needed.value].split(b"\0") if n]


def resolve(function: int) -> tuple[int, str]:
    """(registry index of its image, mangled name) of a CUfunction this process uses."""
    index = ctypes.c_size_t()
    cap = 4096
    while True:
        name = ctypes.create_string_buffer(cap)
        rc = native().fdy_registry_resolve(function, ctypes.byref(index), name, len(name))
        # Mangled names of templated kernels can be longer than any fixed buffer: on TRUNCATED the
        # native side says so, and the name is asked for again in a larger one.
        if rc != ErrorCode.TRUNCATED or cap >= 1 << 24:
            break
        cap *= 16
    check(rc, "resolve", KernelNotFoundError)
    return index.value, name.value.decode()


def function_attrs(function: int) -> FuncAttrs:
    values = (ctypes.c_int32 * FUNC_ATTR_COUNT)()
    check(native().fdy_func_get_attrs(function, values), "cuFuncGetAttribute")
    return FuncAttrs._make(values)


def set_function_attrs(function: int, attrs: Iterable[int]) -> None:
    values = (ctypes.c_int32 * FUNC_ATTR_COUNT)(*attrs)
    check(native().fdy_func_set_attrs(function, values), "cuFuncSetAttribute")


def load_image(sha256: str, data: bytearray) -> int:
    """Loads an archived image once per process, also when several threads ask at once (a program's
    own load racing the background loader): the others wait for the first and get its index.

    ``data`` must be writable (ctypes takes its address); it is kept alive for the life of the
    process because the driver is told it may keep reading it.
    """
    s = _STATE.get()
    with s.lock:
        if sha256 in s.loaded:
            return s.loaded[sha256]
        gate = s.loading.setdefault(sha256, threading.Lock())
    with gate:
        with s.lock:
            if sha256 in s.loaded:
                return s.loaded[sha256]
        buf = (ctypes.c_char * len(data)).from_buffer(data)
        index = ctypes.c_size_t()
        rc = native().fdy_image_load(ctypes.addressof(buf), len(data), sha256.encode(), ctypes.byref(index))
        check(rc, "load image", RegistryError)
        with s.lock:
            s.keepalive.extend((data, buf))
            s.loaded[sha256] = index.value
            s.hashes[index.value] = sha256
            s.loading.pop(sha256, None)
        return index.value


def loaded_image(sha256: str) -> ImageRecord:
    """The registry record (its CUlibrary handle) of the archived image LOAD loaded with this hash."""
    s = _STATE.get()
    with s.lock:
        index = s.loaded.get(sha256)
    if index is None:
        raise KernelNotFoundError(
            f"image {sha256[:16]}... is not loaded: call load_cuda_modules_and_libraries(archive_dir) first"
        )
    return image_record(index)


def is_loaded(sha256: str) -> bool:
    """Whether LOAD already loaded the image with this hash in this process."""
    s = _STATE.get()
    with s.lock:
        return sha256 in s.loaded


def is_looked_up(ref: KernelRef) -> bool:
    """Whether this process has the kernel's CUfunction already (looked up once, then cached)."""
    s = _STATE.get()
    with s.lock:
        return (ref.image, ref.name) in s.functions


def loaded_function(ref: KernelRef) -> int:
    """The CUfunction of an archived kernel, after its image was loaded with load_image."""
    s = _STATE.get()
    key = (ref.image, ref.name)
    with s.lock:
        cached = s.functions.get(key)
        index = s.loaded.get(ref.image)
    if cached:
        return cached
    if index is None:
        raise KernelNotFoundError(
            f"kernel {ref.name} lives in image {ref.image[:16]}..., which is not loaded: call "
            "load_cuda_modules_and_libraries(archive_dir) first"
        )
    out = ctypes.c_uint64()
    check(
        native().fdy_image_function(index, ref.name.encode(), ctypes.byref(out)), "kernel lookup", KernelNotFoundError
    )
    with s.lock:
        s.functions[key] = out.value
    return out.value


class launch_trace:
    """Records every kernel launched eagerly inside the block: ``with launch_trace() as t: ...; t.functions``."""

    def __init__(self) -> None:
        self.functions: list[int] = []

    def __enter__(self) -> launch_trace:
        native().fdy_launch_trace(1)
        return self

    def __exit__(self, *exc: object) -> None:
        lib = native()
        lib.fdy_launch_trace(0)
        n = lib.fdy_launch_trace_read(None, 0)
        buf = (ctypes.c_uint64 * n)()
        n = lib.fdy_launch_trace_read(buf, n)
        self.functions = list(buf[:n])
