"""Graph records to and from driver graphs (native part: csrc/codec_*.c)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TypeAlias

from foundry.errors import ArchiveCorruptError, CodecError

from ._abi import ErrorCode, InstantiateFlag
from .lib import failure, native

__all__ = [
    "INSTANTIATE_DEVICE_LAUNCH",
    "INSTANTIATE_USE_NODE_PRIORITY",
    "NodeHandles",
    "apply_overrides",
    "build",
    "build_with_nodes",
    "check_delta",
    "delta_from_record",
    "delta_indices",
    "destroy_exec",
    "destroy_graph",
    "drop_launches",
    "extract",
    "instantiate",
    "instantiate_uploaded",
    "launch",
    "pointed_words",
    "set_work_enabled",
]

# PyTorch instantiates with it, and kernel nodes keep their priority launch attribute, so loaded graphs
# do the same.
INSTANTIATE_USE_NODE_PRIORITY = InstantiateFlag.USE_NODE_PRIORITY
INSTANTIATE_DEVICE_LAUNCH = InstantiateFlag.DEVICE_LAUNCH  # measured only (foundry.load.probe, through foundry.probe)


NodeHandles: TypeAlias = "ctypes.Array[ctypes.c_uint64]"
"""The CUgraphNode of each top-level node of a graph built from a record, in record order."""


def _check(rc: int, what: str, graph: str = "") -> None:
    """Raises for a failed codec call: ``CodecError`` (or the subclass its code names), except that a kernel node
    whose parameters are not those its kernel takes (``ErrorCode.PARAM_MISMATCH``) is ``ArchiveCorruptError``.
    That is altered archive content, not the driver refusing work, and LOAD's callers tell the two apart: its
    readers and ``foundry verify`` raise ``ArchiveError`` for bad content and the engines report it as such,
    while load/groups.py takes a ``CodecError`` from a switch as the driver's refusal and builds the member an
    exec of its own instead. ``graph`` (the graph's name and file) starts the message."""
    error = failure(rc, what, CodecError)
    if error is None:
        return
    prefix = f"{graph}: " if graph else ""
    if rc == ErrorCode.PARAM_MISMATCH:
        raise ArchiveCorruptError(f"{prefix}{error}")
    raise type(error)(f"{prefix}{error}", error.code) if prefix else error


def extract(graph: int) -> tuple[bytes, list[int]]:
    """(graph record, CUfunction per function index) of a captured CUgraph."""
    lib = native()
    blob = ctypes.c_void_p()
    size = ctypes.c_size_t()
    funcs = ctypes.POINTER(ctypes.c_uint64)()
    nfuncs = ctypes.c_size_t()
    rc = lib.fdy_graph_extract(graph, ctypes.byref(blob), ctypes.byref(size), ctypes.byref(funcs), ctypes.byref(nfuncs))
    _check(rc, "graph extraction")
    try:
        record = ctypes.string_at(blob.value, size.value) if blob.value and size.value else b""
        functions = [int(funcs[i]) for i in range(nfuncs.value)]
    finally:
        lib.fdy_free(blob)
        lib.fdy_free(ctypes.cast(funcs, ctypes.c_void_p))
    return record, functions


class _Buffer:
    """A graph record or delta as a ctypes buffer, kept alive next to whatever the driver built from it."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        self.size = len(view)
        self.c = (
            (ctypes.c_char * self.size).from_buffer_copy(view)
            if view.readonly
            else ((ctypes.c_char * self.size).from_buffer(view))
        )


def _u64_array(values: Sequence[int]) -> ctypes.Array[ctypes.c_uint64]:
    return (ctypes.c_uint64 * len(values))(*values)


def build(record: bytes | bytearray | memoryview, functions: Sequence[int], graph: str = "") -> int:
    """A new CUgraph from a record, with function index i bound to ``functions[i]``. Every kernel node's
    parameters are proven to be its kernel's before the driver sees the node (``_check`` says what a node that
    differs raises); ``graph`` names the graph in messages."""
    return build_with_nodes(record, functions, 0, graph)[0]


def build_with_nodes(
    record: bytes | bytearray | memoryview, functions: Sequence[int], node_count: int, graph: str = ""
) -> tuple[int, NodeHandles]:
    """(CUgraph, handles of its first node_count top-level nodes) built from a record, as ``build``."""
    buf = _Buffer(record)
    funcs = _u64_array(functions)
    nodes = (ctypes.c_uint64 * max(node_count, 1))()
    out = ctypes.c_uint64()
    rc = native().fdy_graph_build(buf.c, buf.size, funcs, len(functions), ctypes.byref(out), nodes, node_count)
    _check(rc, "graph build", graph)
    return out.value, nodes


def apply_overrides(
    target: int,
    to_exec: bool,
    nodes: NodeHandles,
    delta: bytes | bytearray | memoryview,
    functions: Sequence[int],
    graph: str = "",
) -> None:
    """Puts a delta's node parameters into a graph built from its template, or into its exec. Every override
    is checked (``check_delta``) before the first is applied: a delta refused leaves the target as it was."""
    buf = _Buffer(delta)
    funcs = _u64_array(functions)
    rc = native().fdy_overrides_apply(target, int(to_exec), nodes, len(nodes), buf.c, buf.size, funcs, len(funcs))
    _check(rc, "applying a template member's parameters", graph)


def check_delta(
    delta: bytes | bytearray | memoryview, node_count: int, functions: Sequence[int], graph: str = ""
) -> None:
    """Checks a member's delta against its template's ``node_count`` top-level nodes and the member's function
    table, each kernel override's parameters against its kernel's (as ``build``), with no driver call but those
    that describe the kernels."""
    buf = _Buffer(delta)
    funcs = _u64_array(functions)
    _check(native().fdy_delta_check(buf.c, buf.size, node_count, funcs, len(funcs)), "checking a delta", graph)


def delta_indices(delta: bytes | bytearray | memoryview, node_count: int) -> list[int]:
    """The template node indices a delta overrides, checked (each below ``node_count``)."""
    lib = native()
    buf = _Buffer(delta)
    count = ctypes.c_size_t()
    _check(lib.fdy_delta_indices(buf.c, buf.size, node_count, None, 0, ctypes.byref(count)), "delta indices")
    out = (ctypes.c_uint32 * max(count.value, 1))()
    rc = lib.fdy_delta_indices(buf.c, buf.size, node_count, out, count.value, ctypes.byref(count))
    _check(rc, "delta indices")
    return list(out[: count.value])


def delta_from_record(record: bytes | bytearray | memoryview, indices: Sequence[int], template_sha256: str) -> bytes:
    """A delta holding the record's own nodes at ``indices``, against the template whose graph record
    has SHA-256 ``template_sha256`` (hex); the native side writes its whole header."""
    lib = native()
    buf = _Buffer(record)
    idx = (ctypes.c_uint32 * max(len(indices), 1))(*indices)
    sha = bytes.fromhex(template_sha256)
    if len(sha) != 32:
        raise ValueError(f"template SHA-256 {template_sha256!r:.80} is not 32 bytes of hex")
    out = ctypes.c_void_p()
    size = ctypes.c_size_t()
    rc = lib.fdy_delta_from_record(buf.c, buf.size, idx, len(indices), sha, ctypes.byref(out), ctypes.byref(size))
    _check(rc, "template delta")
    try:
        return ctypes.string_at(out.value, size.value) if out.value else b""
    finally:
        lib.fdy_free(out)


def set_work_enabled(graph: int, exec_: int, record: bytes | bytearray | memoryview, enabled: bool) -> None:
    """Switches the kernel, memcpy and memset nodes of ``exec_`` (instantiated from ``graph``, whose record
    ``extract`` made) off or on, in one native call; switching on goes on past a node the driver refuses."""
    buf = _Buffer(record)
    rc = native().fdy_graph_work_enable(graph, exec_, buf.c, buf.size, int(enabled))
    _check(rc, "switching a graph's work " + ("on" if enabled else "off"))


def pointed_words(record: bytes | bytearray | memoryview, ranges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Address -> unsigned 64-bit value of every 8-byte word of the record's kernel arguments that lies in
    one of ``ranges`` ((start, end) device addresses), read from the device in one native call; a word the
    driver cannot read is left out."""
    lib = native()
    buf = _Buffer(record)
    ordered = sorted(ranges)
    flat = (ctypes.c_uint64 * max(2 * len(ordered), 1))(*(v for r in ordered for v in r))
    pairs = ctypes.POINTER(ctypes.c_uint64)()
    count = ctypes.c_size_t()
    rc = lib.fdy_record_pointed_words(buf.c, buf.size, flat, len(ordered), ctypes.byref(pairs), ctypes.byref(count))
    _check(rc, "reading the words a graph's arguments point at")
    try:
        values = pairs[: 2 * count.value] if count.value else []
    finally:
        lib.fdy_free(ctypes.cast(pairs, ctypes.c_void_p))
    return dict(zip(values[0::2], values[1::2], strict=True))


def instantiate(graph: int, flags: int = INSTANTIATE_USE_NODE_PRIORITY) -> int:
    out = ctypes.c_uint64()
    _check(native().fdy_graph_instantiate(graph, flags, ctypes.byref(out)), "graph instantiation")
    return out.value


def instantiate_uploaded(graph: int, flags: int = INSTANTIATE_USE_NODE_PRIORITY) -> int:
    """``instantiate``, then the exec uploaded to the device (``fdy_graph_upload_wait``), so that its first
    launch costs what later ones do; the exec is destroyed if the upload fails."""
    exec_ = instantiate(graph, flags)
    try:
        _check(native().fdy_graph_upload_wait(exec_), "graph upload")
    except BaseException:
        destroy_exec(exec_)
        raise
    return exec_


def launch(exec_: int, stream: int) -> None:
    _check(native().fdy_graph_launch(exec_, stream), "graph launch")


def drop_launches(exec_: int) -> int:
    """Until ``drop_launches(0)``, this thread's launches of ``exec_`` through the interposed cuGraphLaunch
    (the CUDA runtime's, so PyTorch's replays) return success and do nothing; ``launch`` above is not
    affected. Returns how many launches were dropped since this thread last armed."""
    return int(native().fdy_graph_launch_drop(exec_))


def destroy_graph(graph: int) -> None:
    _check(native().fdy_graph_destroy(graph), "graph destroy")


def destroy_exec(exec_: int) -> None:
    _check(native().fdy_graph_exec_destroy(exec_), "exec destroy")
