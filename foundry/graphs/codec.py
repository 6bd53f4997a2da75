"""Graph records to and from driver graphs (native part: csrc/codec_*.c)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from .._native import check, native
from ..errors import CodecError

__all__ = [
    "INSTANTIATE_USE_NODE_PRIORITY",
    "build",
    "destroy_exec",
    "destroy_graph",
    "extract",
    "instantiate",
    "launch",
]

# CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: PyTorch instantiates with it, and kernel nodes keep
# their priority launch attribute, so loaded graphs do the same.
INSTANTIATE_USE_NODE_PRIORITY = 8


def extract(graph: int) -> tuple[bytes, list[int]]:
    """(graph record, CUfunction per function index) of a captured CUgraph."""
    lib = native()
    blob = ctypes.c_void_p()
    size = ctypes.c_size_t()
    funcs = ctypes.POINTER(ctypes.c_uint64)()
    nfuncs = ctypes.c_size_t()
    rc = lib.fdy_graph_extract(graph, ctypes.byref(blob), ctypes.byref(size), ctypes.byref(funcs), ctypes.byref(nfuncs))
    check(rc, "graph extraction", CodecError)
    try:
        record = ctypes.string_at(blob.value, size.value) if blob.value and size.value else b""
        functions = [int(funcs[i]) for i in range(nfuncs.value)]
    finally:
        lib.fdy_free(blob)
        lib.fdy_free(ctypes.cast(funcs, ctypes.c_void_p))
    return record, functions


def build(record: bytes | bytearray | memoryview, functions: Sequence[int]) -> int:
    """A new CUgraph from a record, with function index i bound to ``functions[i]``."""
    lib = native()
    view = memoryview(record).cast("B")
    buf = (
        (ctypes.c_char * len(view)).from_buffer_copy(view)
        if view.readonly
        else (ctypes.c_char * len(view)).from_buffer(view)
    )
    funcs = (ctypes.c_uint64 * len(functions))(*functions)
    out = ctypes.c_uint64()
    check(lib.fdy_graph_build(buf, len(view), funcs, len(functions), ctypes.byref(out)), "graph build", CodecError)
    return out.value


def instantiate(graph: int, flags: int = INSTANTIATE_USE_NODE_PRIORITY) -> int:
    out = ctypes.c_uint64()
    check(native().fdy_graph_instantiate(graph, flags, ctypes.byref(out)), "graph instantiation", CodecError)
    return out.value


def launch(exec_: int, stream: int) -> None:
    check(native().fdy_graph_launch(exec_, stream), "graph launch", CodecError)


def destroy_graph(graph: int) -> None:
    check(native().fdy_graph_destroy(graph), "graph destroy", CodecError)


def destroy_exec(exec_: int) -> None:
    check(native().fdy_graph_exec_destroy(exec_), "exec destroy", CodecError)
