"""Strict reader of the graph record (docs/FORMAT.md, "Graph record").

Contract: ``parse_record`` either returns a ``GraphRecord`` that holds exactly what the input holds (its
canonical encoding is the input: tests/support/encode.py proves it), or raises an ``ArchiveError``
subclass whose message names the byte offset and the field at fault. It never raises anything else,
whatever the input bytes.
"""

from __future__ import annotations

import mmap
from typing import NoReturn

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

from . import layout as L
from .layout import (
    RecAttr,
    RecEdge,
    RecEvent,
    RecHeader,
    RecKernel,
    RecMemcpy,
    RecMemset,
    RecNode,
    RecParam,
    iter_params,
    read_array,
)
from .nodes import (
    ArgMode,
    ChildGraphNode,
    Edge,
    EmptyNode,
    EventNode,
    GraphRecord,
    KernelNode,
    MemcpyNode,
    MemsetNode,
    Node,
    NodeType,
)

__all__ = ["node_count", "parse_node", "parse_record"]

_ZERO8 = bytes(8)
_HEADER_AT = L.offsets("rec_header")
_NODE_AT = L.offsets("rec_node")
_TYPE_AT = _NODE_AT["type"]
_ZERO_EDGE = bytes(RecEdge.unpack_from(bytes(L.EDGE_SIZE)).reserved)
_KERNEL_AT = L.offsets("rec_kernel")
_MEMSET_AT = L.offsets("rec_memset")
_EVENT_AT = L.offsets("rec_event")
_EDGE_AT = L.offsets("rec_edge")
_ATTR_AT = L.offsets("rec_attr")
_KNOWN_TYPES = {t.value: t for t in NodeType}
_ARG_MODES = (ArgMode.PARAMS, ArgMode.EXTRA)


def _fail(offset: int, field: str, problem: str) -> NoReturn:
    raise ArchiveCorruptError(f"graph record, byte {offset}, {field}: {problem}")


def parse_record(
    data: bytes | bytearray | memoryview | mmap.mmap, spans: list[tuple[int, int]] | None = None
) -> GraphRecord:
    """Parse and validate a complete top-level graph record; with ``spans``, also append to it the
    (start, end) of each top-level node record, found on the way.

    Raises ``ArchiveForeignError`` when the data does not start with ``b"FGR1"``,
    ``ArchiveVersionError`` for a record version this reader does not know, and
    ``ArchiveCorruptError`` for everything else (truncation, bad sizes, offsets or indices out of
    bounds, non-zero reserved or padding bytes, ``total bytes`` different from ``len(data)``).
    """
    mv = memoryview(data)
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    n = len(mv)
    head = bytes(mv[:4])
    if head != L.RECORD_MAGIC:
        if n < 4 and L.RECORD_MAGIC.startswith(head):
            _fail(n, "header", f"truncated: the data is {n} bytes long, a record header needs 32")
        raise ArchiveForeignError(f"not a Foundry graph record: bytes 0-3 are {head!r}, expected {L.RECORD_MAGIC!r}")
    if n < L.HEADER_SIZE:
        _fail(n, "header", f"truncated: the data is {n} bytes long, a record header needs 32")
    version = RecHeader.unpack_from(mv).version
    if version not in L.RECORD_VERSIONS:
        raise ArchiveVersionError(
            f"graph record, byte {_HEADER_AT['version']}, version: found version {version}; this Foundry reads "
            f"graph record version(s) {', '.join(map(str, L.RECORD_VERSIONS))}. Load it with the Foundry release "
            "that wrote it, or save the graph again."
        )
    parser = _Parser(mv)
    parser.spans = spans
    record, _ = parser.record(0, n, top=True, depth=0, where="")
    return record


def node_count(data: bytes | bytearray | memoryview) -> int:
    """The top-level node count a graph record's header states, checked against the bytes present (the
    rest of the record is parsed or walked, with all its checks, before it is used)."""
    mv = memoryview(data).cast("B")
    if len(mv) < L.HEADER_SIZE:
        _fail(0, "record header", f"needs 32 bytes, only {len(mv)} remain")
    count = RecHeader.unpack_from(mv).node_count
    if count * L.NODE_HEAD_SIZE > len(mv) - L.HEADER_SIZE:  # checked before anyone sizes a buffer by it
        _fail(_HEADER_AT["node_count"], "record header node count", f"{count} nodes cannot fit in {len(mv)} bytes")
    return count


def parse_node(
    data: bytes | bytearray | memoryview, offset: int, end: int, function_count: int, where: str = ""
) -> tuple[Node, int]:
    """Parse one node record at ``offset`` (ending at or before ``end``) whose function indices must be
    below ``function_count``; returns the node and its size. Used for deltas' override records."""
    mv = memoryview(data)
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    parser = _Parser(mv)
    parser.function_count = function_count
    return parser.node(offset, end, 0, 0, where)


def _label(where: str, i: int, ntype: int) -> str:
    """How error messages name a node (built only when one fails: the parse visits every node of every
    graph ``foundry verify`` reads)."""
    known = _KNOWN_TYPES.get(ntype)
    return f"{where}node {i} ({known.name.lower() if known is not None else ntype})"


class _Parser:
    """Walks one buffer; ``function_count``/``event_count`` come from the top-level header."""

    __slots__ = ("event_count", "function_count", "mv", "spans")

    def __init__(self, mv: memoryview) -> None:
        self.mv = mv
        self.function_count = 0
        self.event_count = 0
        self.spans: list[tuple[int, int]] | None = None  # the top-level nodes' (start, end), when asked for

    def record(self, start: int, limit: int, *, top: bool, depth: int, where: str) -> tuple[GraphRecord, int]:
        """Parse the record at ``start`` that must end at or before ``limit`` (exactly at it when
        ``top``). Returns the record and its total size."""
        mv = self.mv
        what = "record header" if top else f"{where}child graph header"
        if depth > L.MAX_DEPTH:
            _fail(start, what, f"child graphs are nested more than {L.MAX_DEPTH} deep")
        if limit - start < L.HEADER_SIZE:
            _fail(start, what, f"needs 32 bytes, only {limit - start} remain in the enclosing record")
        head = RecHeader.unpack_from(mv, start)
        ncount, ecount, fcount, evcount, total = (
            head.node_count, head.edge_count, head.function_count, head.event_count, head.total_bytes
        )  # fmt: skip
        if head.magic != L.RECORD_MAGIC:
            _fail(start, f"{what} magic", f"{head.magic!r}, expected {L.RECORD_MAGIC!r}")
        if head.version != L.RECORD_VERSION:
            _fail(start + _HEADER_AT["version"], f"{what} version",
                  f"{head.version}, the enclosing record is version {L.RECORD_VERSION}")  # fmt: skip
        if head.header_bytes != L.HEADER_SIZE:
            _fail(start + _HEADER_AT["header_bytes"], f"{what} size", f"{head.header_bytes}, expected {L.HEADER_SIZE}")
        if total % 8 or total < L.HEADER_SIZE:
            _fail(start + _HEADER_AT["total_bytes"], f"{what} total bytes",
                  f"{total} is not a multiple of 8 of at least {L.HEADER_SIZE}")  # fmt: skip
        if top:
            if total != limit:
                _fail(_HEADER_AT["total_bytes"], "record header total bytes",
                      f"{total}, but the data is {limit} bytes long")  # fmt: skip
            self.function_count, self.event_count = fcount, evcount
        else:
            if total > limit - start:
                _fail(
                    start + _HEADER_AT["total_bytes"], f"{what} total bytes", f"{total} runs past the node record's end"
                )
            if fcount:
                _fail(start + _HEADER_AT["function_count"], f"{what} function count",
                      f"{fcount}, child graphs must have 0")  # fmt: skip
            if evcount:
                _fail(start + _HEADER_AT["event_count"], f"{what} event count", f"{evcount}, child graphs must have 0")
        end = start + total
        if ncount * L.NODE_HEAD_SIZE + ecount * L.EDGE_SIZE > total - L.HEADER_SIZE:
            _fail(
                start + _HEADER_AT["node_count"],
                f"{what} node/edge count",
                f"{ncount} nodes and {ecount} edges cannot fit in a {total}-byte record",
            )
        if evcount * L.EVENT_SIZE > total - L.HEADER_SIZE:  # each event is used by at least one event node
            _fail(start + _HEADER_AT["event_count"], f"{what} event count",
                  f"{evcount} events cannot be used by the nodes of {total} bytes")  # fmt: skip
        off = start + L.HEADER_SIZE
        nodes: list[Node] = []
        spans = self.spans if top else None
        for i in range(ncount):
            node, size = self.node(off, end, i, depth, where)
            nodes.append(node)
            if spans is not None:
                spans.append((off, off + size))
            off += size
        if end - off != ecount * L.EDGE_SIZE:
            _fail(
                off,
                f"{where}edge table",
                f"{ecount} edges need {ecount * L.EDGE_SIZE} bytes, {end - off} remain before byte {end}",
            )
        edges = []
        for j, e in enumerate(read_array(RecEdge, mv, off, ecount)):
            at = off + j * L.EDGE_SIZE
            if e.from_ >= ncount:
                _fail(at + _EDGE_AT["from"], f"{where}edge {j} from", f"node {e.from_} does not exist ({ncount} nodes)")
            if e.to >= ncount:
                _fail(at + _EDGE_AT["to"], f"{where}edge {j} to", f"node {e.to} does not exist ({ncount} nodes)")
            if e.reserved != _ZERO_EDGE:
                _fail(at + _EDGE_AT["reserved"], f"{where}edge {j} reserved", "must be zero")
            edges.append(Edge(e.from_, e.to, e.from_port, e.to_port, e.type))
        fc, ec = (fcount, evcount) if top else (0, 0)
        return GraphRecord(tuple(nodes), tuple(edges), fc, ec), total

    def node(self, off: int, end: int, i: int, depth: int, where: str) -> tuple[Node, int]:
        """Parse node ``i`` at ``off`` inside a record ending at ``end``."""
        mv = self.mv
        if end - off >= L.KERNEL_HEAD_SIZE and mv[off + _TYPE_AT] == NodeType.KERNEL:
            # The common case (kernel nodes, most of any graph): the kernel record's fixed part read once,
            # header included, and no label built unless something is wrong.
            k = RecKernel.unpack_from(mv, off)
            size = k.h_bytes
            if not (k.h_reserved0 or k.h_reserved1) and L.KERNEL_HEAD_SIZE <= size <= end - off and not size % 8:
                return self.kernel(off, k, where, i), size
        if end - off < L.NODE_HEAD_SIZE:
            _fail(off, f"{where}node {i} header", f"needs 8 bytes, only {end - off} remain before byte {end}")
        head = RecNode.unpack_from(mv, off)
        ntype, size = head.type, head.bytes
        reserved = head.reserved0 or head.reserved1
        known = _KNOWN_TYPES.get(ntype)
        label = _label(where, i, ntype)
        if reserved:
            _fail(off + _NODE_AT["reserved0" if head.reserved0 else "reserved1"], f"{label} reserved", "must be zero")
        if size < L.NODE_HEAD_SIZE or size % 8:
            _fail(off + _NODE_AT["bytes"], f"{label} record size", f"{size} is not a positive multiple of 8")
        if size > end - off:
            _fail(off + _NODE_AT["bytes"], f"{label} record size", f"{size} runs past the record's end at byte {end}")
        if ntype == NodeType.KERNEL:
            if size < L.KERNEL_HEAD_SIZE:
                _fail(off + _NODE_AT["bytes"], f"{label} record size",
                      f"{size}, a kernel node needs at least {L.KERNEL_HEAD_SIZE}")  # fmt: skip
            return self.kernel(off, RecKernel.unpack_from(mv, off), where, i), size
        if ntype == NodeType.GRAPH:
            if size < L.NODE_HEAD_SIZE + L.HEADER_SIZE:
                _fail(off + _NODE_AT["bytes"], f"{label} record size", f"{size} is too small to hold a child record")
            child, total = self.record(
                off + L.NODE_HEAD_SIZE, off + size, top=False, depth=depth + 1, where=f"{where}node {i} > "
            )
            if total + L.NODE_HEAD_SIZE != size:
                _fail(off + _NODE_AT["bytes"], f"{label} record size", f"{size}, but the child record is {total} bytes")
            return ChildGraphNode(child), size
        if ntype == NodeType.MEMSET:
            self.expect_size(off, size, L.MEMSET_SIZE, label)
            s = RecMemset.unpack_from(mv, off)
            if s.element_size not in (1, 2, 4):
                _fail(off + _MEMSET_AT["element_size"], f"{label} element size", f"{s.element_size}, must be 1, 2 or 4")
            return MemsetNode(s.dst, s.pitch, s.value, s.element_size, s.width, s.height), size
        if ntype == NodeType.MEMCPY:
            self.expect_size(off, size, L.MEMCPY_SIZE, label)
            c = RecMemcpy.unpack_from(mv, off)
            return MemcpyNode(
                src_device=c.src_device, src_x_bytes=c.src_x, src_y=c.src_y, src_z=c.src_z, src_pitch=c.src_pitch,
                src_height=c.src_height, dst_device=c.dst_device, dst_x_bytes=c.dst_x, dst_y=c.dst_y, dst_z=c.dst_z,
                dst_pitch=c.dst_pitch, dst_height=c.dst_height, width_bytes=c.width, height=c.height, depth=c.depth,
                src_memory_type=c.src_type, dst_memory_type=c.dst_type,
            ), size  # fmt: skip
        if ntype == NodeType.WAIT_EVENT or ntype == NodeType.EVENT_RECORD:
            self.expect_size(off, size, L.EVENT_SIZE, label)
            e = RecEvent.unpack_from(mv, off)
            if e.event >= self.event_count:
                _fail(
                    off + _EVENT_AT["event"],
                    f"{label} event index",
                    f"{e.event} is not below the event count {self.event_count}",
                )
            if e.reserved:
                _fail(off + _EVENT_AT["reserved"], f"{label} reserved", "must be zero")
            return EventNode(_KNOWN_TYPES[ntype], e.event), size
        if ntype == NodeType.EMPTY:
            self.expect_size(off, size, L.EMPTY_SIZE, label)
            return EmptyNode(), size
        if known is not None:
            _fail(off, f"{label} type", f"{known.name} nodes cannot appear in a format-1 record")
        _fail(off, f"{label} type", f"unknown node type {ntype}")

    @staticmethod
    def expect_size(off: int, size: int, expected: int, label: str) -> None:
        if size != expected:
            _fail(off + _NODE_AT["bytes"], f"{label} record size", f"{size}, must be {expected}")

    def kernel_header_fail(self, off: int, i: int, where: str, k: RecKernel) -> NoReturn:
        """The first problem of a kernel node's fixed fields (called only when there is one)."""
        label = _label(where, i, NodeType.KERNEL)
        if k.function >= self.function_count:
            _fail(off + _KERNEL_AT["function"], f"{label} function index",
                  f"{k.function} is not below the function count {self.function_count}")  # fmt: skip
        if k.arg_mode > 1:
            _fail(off + _KERNEL_AT["arg_mode"], f"{label} argument mode",
                  f"{k.arg_mode}, must be 0 (kernelParams) or 1 (extra)")  # fmt: skip
        for field in ("reserved0", "reserved1", "reserved2"):
            if getattr(k, field):
                _fail(off + _KERNEL_AT[field], f"{label} reserved", "must be zero")
        _fail(off + _KERNEL_AT["param_count"], f"{label} parameter count",
              f"{k.param_count}, must be 0 with an extra buffer")  # fmt: skip

    def kernel(self, off: int, k: RecKernel, where: str, i: int) -> KernelNode:
        """Kernel node ``i`` at ``off`` whose fixed part ``k`` was read (its record size checked against the
        bytes present). The common node: checks are inline, messages built only on failure."""
        mv = self.mv
        size = k.h_bytes
        mode, pcount, acount, bsize = k.arg_mode, k.param_count, k.attr_count, k.arg_bytes
        if (
            k.function >= self.function_count
            or mode > 1
            or k.reserved0
            or k.reserved1
            or k.reserved2
            or (mode == ArgMode.EXTRA and pcount)
        ):
            self.kernel_header_fail(off, i, where, k)
        params_at = off + L.KERNEL_HEAD_SIZE
        attrs_at = params_at + pcount * L.PARAM_SIZE
        args_at = attrs_at + acount * L.ATTR_SIZE
        pad_at = args_at + bsize
        end = off + size
        if L.pad8(pad_at - off) != size:
            _fail(
                off + _NODE_AT["bytes"],
                f"{_label(where, i, NodeType.KERNEL)} record size",
                f"{size}, but {pcount} parameters, {acount} launch attributes and a {bsize}-byte "
                f"argument buffer need {L.pad8(pad_at - off)}",
            )
        params: tuple[tuple[int, int], ...] = ()
        if pcount:
            params = tuple(iter_params(mv[params_at:attrs_at]))
            if max(map(sum, params)) > bsize:  # a parameter ends at offset + size; then find which, for the message
                for n, p in enumerate(map(RecParam._make, params)):
                    if p.offset + p.size <= bsize:
                        continue
                    _fail(
                        params_at + n * L.PARAM_SIZE,
                        f"{_label(where, i, NodeType.KERNEL)} parameter {n}",
                        f"bytes {p.offset}..{p.offset + p.size} lie outside the {bsize}-byte argument buffer",
                    )
        attrs: tuple[tuple[int, bytes], ...] = ()
        if acount:
            table = read_array(RecAttr, mv, attrs_at, acount)
            attrs = tuple((a.id, a.value) for a in table)
            for n, a in enumerate(table):
                if a.reserved:
                    _fail(
                        attrs_at + n * L.ATTR_SIZE + _ATTR_AT["reserved"],
                        f"{_label(where, i, NodeType.KERNEL)} launch attribute {n} reserved",
                        "must be zero",
                    )
        if pad_at != end and mv[pad_at:end] != _ZERO8[: end - pad_at]:
            _fail(pad_at, f"{_label(where, i, NodeType.KERNEL)} padding", "must be zero")
        return KernelNode(
            k.function, k.grid, k.block, k.shared_mem, _ARG_MODES[mode], params, attrs, bytes(mv[args_at:pad_at])
        )
