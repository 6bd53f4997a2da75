"""Graph records checked and compared in one native call each (csrc/record_scan.c), for SAVE: no node
objects are built. ``scan_record`` accepts exactly the records ``foundry.records.parse_record`` accepts."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from foundry.errors import ArchiveCorruptError, CodecError

from ._abi import ErrorCode, RecordScanInfo
from .codec import _Buffer
from .lib import check, native

__all__ = ["COUNT_KEYS", "RecordComparison", "RecordScan", "compare_records", "scan_record"]

COUNT_KEYS = ("nodes", "edges", "kernel", "memcpy", "memset", "child_graph", "empty", "event_wait", "event_record")
"""The keys of ``RecordScan.counts``: those of ``foundry.records.node_counts``, in its order (each a field of
``fdy_record_scan_info``)."""

Data = bytes | bytearray | memoryview


@dataclass(frozen=True)
class RecordScan:
    """What a checked graph record holds: its top-level header's counts, the whole tree's ``counts``
    (``COUNT_KEYS``), whether it holds child graphs, the (start, end) byte offsets of each top-level node
    record, the function index of every kernel node of the tree (depth first, parents before children:
    ``foundry.records.iter_nodes``), and the topology key's material after its version prefix (None with
    child graphs: a child's part is its own key's digest)."""

    function_count: int
    event_count: int
    node_count: int
    edge_count: int
    counts: dict[str, int]
    children: bool
    spans: tuple[tuple[int, int], ...]
    kernel_functions: tuple[int, ...]
    topology: bytes | None


@dataclass(frozen=True)
class RecordComparison:
    """Two records' top-level nodes compared: the indices whose nodes differ (empty when ``blocked``), the
    first differing node an exec cannot switch (None when none), and whether the edge tables are equal."""

    differing: tuple[int, ...]
    blocked: int | None
    edges_equal: bool


def _pointer(data: Data) -> tuple[Any, int]:
    """A pointer to ``data`` for the call (bytes as they are, anything else through a buffer) and its size."""
    if isinstance(data, bytes):
        return data, len(data)
    buf = _Buffer(data)
    return buf.c, buf.size


def _check(rc: int, what: str) -> None:
    """A damaged record is ``ArchiveCorruptError``; a call the records do not fit (unequal node counts, too few
    function identities) ``ValueError``; anything else as ``check`` raises it."""
    if rc == ErrorCode.CORRUPT:
        raise ArchiveCorruptError(native().last_error() or f"{what}: damaged graph record")
    if rc == ErrorCode.INVALID:
        raise ValueError(native().last_error() or f"{what}: invalid argument")
    check(rc, what, CodecError)


def scan_record(record: Data) -> RecordScan:
    """Checks a top-level graph record and reads what SAVE needs of it; raises ``ArchiveCorruptError`` naming
    the byte and the field at fault for any record ``parse_record`` refuses."""
    lib = native()
    ptr, size = _pointer(record)
    info = RecordScanInfo()
    spans = ctypes.POINTER(ctypes.c_uint64)()
    kernels = ctypes.POINTER(ctypes.c_uint32)()
    topology = ctypes.POINTER(ctypes.c_uint8)()
    topology_size = ctypes.c_size_t()
    rc = lib.fdy_record_scan(
        ptr, size, ctypes.byref(info), ctypes.byref(spans), ctypes.byref(kernels), ctypes.byref(topology),
        ctypes.byref(topology_size),
    )  # fmt: skip
    try:
        _check(rc, "graph record scan")
        flat = spans[: 2 * info.node_count] if spans else []
        return RecordScan(
            function_count=info.function_count,
            event_count=info.event_count,
            node_count=info.node_count,
            edge_count=info.edge_count,
            counts={key: getattr(info, key) for key in COUNT_KEYS},
            children=bool(info.children),
            spans=tuple(zip(flat[0::2], flat[1::2], strict=True)),
            kernel_functions=tuple(kernels[: info.kernel]) if kernels else (),
            topology=None if info.children else ctypes.string_at(topology, topology_size.value),
        )
    finally:
        for pointer in (spans, kernels, topology):
            lib.fdy_free(ctypes.cast(pointer, ctypes.c_void_p))


def compare_records(a: Data, a_ids: Sequence[int], b: Data, b_ids: Sequence[int]) -> RecordComparison:
    """Compares the top-level nodes of two records that ``scan_record`` accepted and that have as many nodes;
    ``a_ids[f]`` (``b_ids[f]``) numbers the identity of ``a``'s (``b``'s) function f, equal numbers for equal
    functions. Nodes are the same when their records' bytes are, except that kernels (child graphs' too) must
    name functions of equal identity. Raises ``ValueError`` for unequal node counts or identities missing,
    ``ArchiveCorruptError`` for bytes that are not a well-formed record."""
    for ids in (a_ids, b_ids):
        if any(not 0 <= i < 1 << 32 for i in ids):
            raise ValueError("function identities are numbered from 0 to 2**32 - 1")
    lib = native()
    (pa, sa), (pb, sb) = _pointer(a), _pointer(b)
    ids_a = (ctypes.c_uint32 * max(len(a_ids), 1))(*a_ids)
    ids_b = (ctypes.c_uint32 * max(len(b_ids), 1))(*b_ids)
    out = ctypes.POINTER(ctypes.c_uint32)()
    count = ctypes.c_size_t()
    blocked = ctypes.c_int64()
    edges = ctypes.c_int()
    rc = lib.fdy_record_compare(
        pa, sa, ids_a, len(a_ids), pb, sb, ids_b, len(b_ids), ctypes.byref(out), ctypes.byref(count),
        ctypes.byref(blocked), ctypes.byref(edges),
    )  # fmt: skip
    try:
        _check(rc, "graph record comparison")
        differing = tuple(out[: count.value]) if out else ()
    finally:
        lib.fdy_free(ctypes.cast(out, ctypes.c_void_p))
    return RecordComparison(differing, None if blocked.value < 0 else blocked.value, bool(edges.value))
