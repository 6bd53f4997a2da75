"""The kernel-image registry seen from Python.

A kernel is identified across processes by (content hash of its image, mangled entry name). SAVE
maps each CUfunction a graph uses to that pair; LOAD loads the images and maps the pair back to a
CUfunction of its own.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from foundry._state import ProcessState
from foundry.errors import KernelNotFoundError, RegistryError
from foundry.native import NativeImageFormat
from foundry.native import registry as native
from foundry.native.registry import ImageRecord
from foundry.records import FuncAttr

__all__ = [
    "FUNC_ATTR_COUNT",
    "ImageFormat",
    "ImageRecord",
    "KernelRef",
    "describe_functions",
    "function_attrs",
    "image_bytes",
    "image_entries",
    "image_hash",
    "image_record",
    "is_loaded",
    "launch_trace",
    "load_image",
    "load_images",
    "loaded_function",
    "loaded_functions",
    "loaded_image",
    "recorded_images",
    "set_function_attrs",
]

FUNC_ATTR_COUNT = len(FuncAttr)
ImageFormat = NativeImageFormat


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
    return native.registry_image(index)


def recorded_images() -> list[ImageRecord]:
    return [native.registry_image(i) for i in range(native.registry_count())]


def image_bytes(index: int, record: ImageRecord | None = None) -> memoryview:
    """A zero-copy view of a recorded image (valid while the image stays loaded); ``record`` when the
    caller has the image's record already."""
    rec = native.registry_image(index) if record is None else record
    if rec.format is ImageFormat.UNKNOWN or not rec.size or not rec.data:
        raise RegistryError(
            f"image {index} ({rec.kind} {rec.handle:#x}) has an unknown format, so its size and bytes cannot be "
            "saved; graphs using its kernels cannot be persisted"
        )
    return native.image_view(rec)


def image_hash(index: int, record: ImageRecord | None = None) -> str:
    """sha256 of a recorded image, computed once (SAVE hashes only the images graphs use); ``record`` when
    the caller has the image's record already."""
    s = _STATE.get()
    with s.lock:
        cached = s.hashes.get(index)
    if cached:
        return cached
    rec = native.registry_image(index) if record is None else record
    digest = rec.hash or hashlib.sha256(image_bytes(index, rec)).hexdigest()
    with s.lock:
        s.hashes[index] = digest
    return digest


image_entries = native.image_entries
describe_functions = native.describe_functions
function_attrs = native.function_attrs
set_function_attrs = native.set_function_attrs


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
    load_images([(sha256, data)])
    with s.lock:
        return s.loaded[sha256]


def load_images(images: Sequence[tuple[str, bytearray]]) -> None:
    """``load_image`` for several images (sha256, data), those not loaded yet in one native call, so that a
    thread loading them lets the interpreter lock go once, not once per image: beside a thread running
    Python it would wait up to the switch interval (5 ms) to get it back after each. Raises the first image's
    error that the driver refused; the images before it stay loaded and registered."""
    s = _STATE.get()
    gates: list[threading.Lock] = []
    with s.lock:
        # Sorted, so that two callers taking several gates cannot each hold one the other waits for.
        for sha in sorted({sha for sha, _ in images if sha not in s.loaded}):
            gates.append(s.loading.setdefault(sha, threading.Lock()))
    for gate in gates:
        gate.acquire()
    try:
        with s.lock:
            todo = [(data, sha) for sha, data in dict(images).items() if sha not in s.loaded]
        loaded, error = native.load_images(todo) if todo else ([], None)
        with s.lock:
            for (data, sha), (index, keep) in zip(todo, loaded, strict=False):
                s.keepalive.extend((data, keep))
                s.loaded[sha] = index
                s.hashes[index] = sha
                s.loading.pop(sha, None)
    finally:
        for gate in gates:
            gate.release()
    if error is not None:
        raise error


def loaded_functions(refs: Sequence[KernelRef]) -> None:
    """Looks up (``loaded_function``) the kernels not looked up yet, in one native call; raises
    ``KernelNotFoundError`` naming the first the driver cannot find, or whose image is not loaded."""
    s = _STATE.get()
    with s.lock:
        todo = list({(r.image, r.name): r for r in refs if (r.image, r.name) not in s.functions}.values())
        where = [s.loaded.get(r.image) for r in todo]
    missing = next((r for r, index in zip(todo, where, strict=True) if index is None), None)
    if missing is not None:
        raise KernelNotFoundError(
            f"kernel {missing.name} lives in image {missing.image[:16]}..., which is not loaded: call "
            "load_cuda_modules_and_libraries(archive_dir) first"
        )
    found, error = native.image_functions([(int(i or 0), r.name) for r, i in zip(todo, where, strict=True)])
    with s.lock:
        for r, function in zip(todo, found, strict=False):
            s.functions[(r.image, r.name)] = function
    if error is not None:
        raise error


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
    if cached:
        return cached
    loaded_functions([ref])
    with s.lock:
        return s.functions[key]


class launch_trace:
    """Records every kernel launched eagerly inside the block: ``with launch_trace() as t: ...; t.functions``."""

    def __init__(self) -> None:
        self.functions: list[int] = []

    def __enter__(self) -> launch_trace:
        native.launch_trace_set(True)
        return self

    def __exit__(self, *exc: object) -> None:
        native.launch_trace_set(False)
        self.functions = native.launch_trace_read()
