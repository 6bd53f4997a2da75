"""Strict reader of the graph record (docs/FORMAT.md, "Graph record").

Contract: ``parse_record`` either returns a ``GraphRecord`` whose ``encode_record`` is exactly the
input, or raises an ``ArchiveError`` subclass whose message names the byte offset and the field
at fault. It never raises anything else, whatever the input bytes.
"""

from __future__ import annotations

import mmap
from operator import add
from typing import NoReturn

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

from . import layout as L
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

__all__ = ["node_count", "node_spans", "parse_node", "parse_record"]

_ZERO8 = bytes(8)
_ZERO5 = bytes(5)
_KNOWN_TYPES = {t.value: t for t in NodeType}
_ARG_MODES = (ArgMode.PARAMS, ArgMode.EXTRA)


def _fail(offset: int, field: str, problem: str) -> NoReturn:
    raise ArchiveCorruptError(f"graph record, byte {offset}, {field}: {problem}")


def parse_record(data: bytes | bytearray | memoryview | mmap.mmap) -> GraphRecord:
    """Parse and validate a complete top-level graph record.

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
    version = int.from_bytes(mv[4:6], "little")
    if version not in L.RECORD_VERSIONS:
        raise ArchiveVersionError(
            f"graph record, byte 4, version: found version {version}; this Foundry reads graph record "
            f"version(s) {', '.join(map(str, L.RECORD_VERSIONS))}. Load it with the Foundry release "
            "that wrote it, or save the graph again."
        )
    parser = _Parser(mv)
    record, _ = parser.record(0, n, top=True, depth=0, where="")
    return record


def node_count(data: bytes | bytearray | memoryview) -> int:
    """The top-level node count a graph record's header states, checked against the bytes present (the
    rest of the record is parsed or walked, with all its checks, before it is used)."""
    mv = memoryview(data).cast("B")
    if len(mv) < L.HEADER_SIZE:
        _fail(0, "record header", f"needs 32 bytes, only {len(mv)} remain")
    count = int(L.HEADER.unpack_from(mv, 0)[3])
    if count * L.NODE_HEAD_SIZE > len(mv) - L.HEADER_SIZE:  # checked before anyone sizes a buffer by it
        _fail(8, "record header node count", f"{count} nodes cannot fit in {len(mv)} bytes")
    return count


def node_spans(data: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """(start, end) of each top-level node record of a graph record, without parsing the nodes
    (bounds checked; a problem raises ``ArchiveCorruptError``)."""
    mv = memoryview(data).cast("B")
    if len(mv) < L.HEADER_SIZE:
        _fail(0, "record header", f"needs 32 bytes, only {len(mv)} remain")
    ncount = L.HEADER.unpack_from(mv, 0)[3]
    out = []
    at = L.HEADER_SIZE
    for i in range(ncount):
        if at + L.NODE_HEAD_SIZE > len(mv):
            _fail(at, f"node {i} header", "runs past the record's end")
        size = L.NODE_HEAD.unpack_from(mv, at)[3]
        if size < L.NODE_HEAD_SIZE or at + size > len(mv):
            _fail(at + 4, f"node {i} record size", f"{size} does not fit the record")
        out.append((at, at + size))
        at += size
    return out


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
    """How error messages name a node (built only when one fails: parsing is SAVE's hot loop)."""
    known = _KNOWN_TYPES.get(ntype)
    return f"{where}node {i} ({known.name.lower() if known is not None else ntype})"


class _Parser:
    """Walks one buffer; ``function_count``/``event_count`` come from the top-level header."""

    __slots__ = ("event_count", "function_count", "mv")

    def __init__(self, mv: memoryview) -> None:
        self.mv = mv
        self.function_count = 0
        self.event_count = 0

    def record(self, start: int, limit: int, *, top: bool, depth: int, where: str) -> tuple[GraphRecord, int]:
        """Parse the record at ``start`` that must end at or before ``limit`` (exactly at it when
        ``top``). Returns the record and its total size."""
        mv = self.mv
        what = "record header" if top else f"{where}child graph header"
        if depth > L.MAX_DEPTH:
            _fail(start, what, f"child graphs are nested more than {L.MAX_DEPTH} deep")
        if limit - start < L.HEADER_SIZE:
            _fail(start, what, f"needs 32 bytes, only {limit - start} remain in the enclosing record")
        magic, version, hsize, ncount, ecount, fcount, evcount, total = L.HEADER.unpack_from(mv, start)
        if magic != L.RECORD_MAGIC:
            _fail(start, f"{what} magic", f"{magic!r}, expected {L.RECORD_MAGIC!r}")
        if version != L.RECORD_VERSION:
            _fail(start + 4, f"{what} version", f"{version}, the enclosing record is version 1")
        if hsize != L.HEADER_SIZE:
            _fail(start + 6, f"{what} size", f"{hsize}, expected 32")
        if total % 8 or total < L.HEADER_SIZE:
            _fail(start + 24, f"{what} total bytes", f"{total} is not a multiple of 8 of at least 32")
        if top:
            if total != limit:
                _fail(24, "record header total bytes", f"{total}, but the data is {limit} bytes long")
            self.function_count, self.event_count = fcount, evcount
        else:
            if total > limit - start:
                _fail(start + 24, f"{what} total bytes", f"{total} runs past the node record's end")
            if fcount:
                _fail(start + 16, f"{what} function count", f"{fcount}, child graphs must have 0")
            if evcount:
                _fail(start + 20, f"{what} event count", f"{evcount}, child graphs must have 0")
        end = start + total
        if ncount * L.NODE_HEAD_SIZE + ecount * L.EDGE_SIZE > total - L.HEADER_SIZE:
            _fail(
                start + 8,
                f"{what} node/edge count",
                f"{ncount} nodes and {ecount} edges cannot fit in a {total}-byte record",
            )
        if evcount * L.EVENT_SIZE > total - L.HEADER_SIZE:  # each event is used by at least one event node
            _fail(start + 20, f"{what} event count", f"{evcount} events cannot be used by the nodes of {total} bytes")
        off = start + L.HEADER_SIZE
        nodes: list[Node] = []
        for i in range(ncount):
            node, size = self.node(off, end, i, depth, where)
            nodes.append(node)
            off += size
        if end - off != ecount * L.EDGE_SIZE:
            _fail(
                off,
                f"{where}edge table",
                f"{ecount} edges need {ecount * L.EDGE_SIZE} bytes, {end - off} remain before byte {end}",
            )
        edges = []
        for j, (src, dst, fport, tport, etype, reserved) in enumerate(L.EDGE.iter_unpack(mv[off:end])):
            at = off + j * L.EDGE_SIZE
            if src >= ncount:
                _fail(at, f"{where}edge {j} from", f"node {src} does not exist ({ncount} nodes)")
            if dst >= ncount:
                _fail(at + 4, f"{where}edge {j} to", f"node {dst} does not exist ({ncount} nodes)")
            if reserved != _ZERO5:
                _fail(at + 11, f"{where}edge {j} reserved", "must be zero")
            edges.append(Edge(src, dst, fport, tport, etype))
        fc, ec = (fcount, evcount) if top else (0, 0)
        return GraphRecord(tuple(nodes), tuple(edges), fc, ec), total

    def node(self, off: int, end: int, i: int, depth: int, where: str) -> tuple[Node, int]:
        """Parse node ``i`` at ``off`` inside a record ending at ``end``."""
        mv = self.mv
        if end - off < L.NODE_HEAD_SIZE:
            _fail(off, f"{where}node {i} header", f"needs 8 bytes, only {end - off} remain before byte {end}")
        ntype, r1, r2, size = L.NODE_HEAD.unpack_from(mv, off)
        if (
            ntype == NodeType.KERNEL
            and not (r1 or r2)
            and size >= L.NODE_HEAD_SIZE
            and not size % 8
            and size <= end - off
        ):
            return self.kernel(off, size, where, i), size  # the common case, without building the label
        known = _KNOWN_TYPES.get(ntype)
        label = _label(where, i, ntype)
        if r1 or r2:
            _fail(off + 1 if r1 else off + 2, f"{label} reserved", "must be zero")
        if size < L.NODE_HEAD_SIZE or size % 8:
            _fail(off + 4, f"{label} record size", f"{size} is not a positive multiple of 8")
        if size > end - off:
            _fail(off + 4, f"{label} record size", f"{size} runs past the record's end at byte {end}")
        if ntype == NodeType.KERNEL:
            return self.kernel(off, size, where, i), size
        if ntype == NodeType.GRAPH:
            if size < L.NODE_HEAD_SIZE + L.HEADER_SIZE:
                _fail(off + 4, f"{label} record size", f"{size} is too small to hold a child record")
            child, total = self.record(off + 8, off + size, top=False, depth=depth + 1, where=f"{where}node {i} > ")
            if total + L.NODE_HEAD_SIZE != size:
                _fail(off + 4, f"{label} record size", f"{size}, but the child record is {total} bytes")
            return ChildGraphNode(child), size
        if ntype == NodeType.MEMSET:
            self.expect_size(off, size, L.MEMSET_SIZE, label)
            dst, pitch, value, esize, width, height = L.MEMSET.unpack_from(mv, off + 8)
            if esize not in (1, 2, 4):
                _fail(off + 20, f"{label} element size", f"{esize}, must be 1, 2 or 4")
            return MemsetNode(dst, pitch, value, esize, width, height), size
        if ntype == NodeType.MEMCPY:
            self.expect_size(off, size, L.MEMCPY_SIZE, label)
            return MemcpyNode(*L.MEMCPY.unpack_from(mv, off + 8)), size
        if ntype == NodeType.WAIT_EVENT or ntype == NodeType.EVENT_RECORD:
            self.expect_size(off, size, L.EVENT_SIZE, label)
            index, reserved = L.EVENT.unpack_from(mv, off + 8)
            if index >= self.event_count:
                _fail(
                    off + 8,
                    f"{label} event index",
                    f"{index} is not below the event count {self.event_count}",
                )
            if reserved:
                _fail(off + 12, f"{label} reserved", "must be zero")
            return EventNode(_KNOWN_TYPES[ntype], index), size
        if ntype == NodeType.EMPTY:
            self.expect_size(off, size, L.EMPTY_SIZE, label)
            return EmptyNode(), size
        if known is not None:
            _fail(off, f"{label} type", f"{known.name} nodes cannot appear in a format-1 record")
        _fail(off, f"{label} type", f"unknown node type {ntype}")

    @staticmethod
    def expect_size(off: int, size: int, expected: int, label: str) -> None:
        if size != expected:
            _fail(off + 4, f"{label} record size", f"{size}, must be {expected}")

    def kernel_header_fail(
        self, off: int, i: int, where: str, func: int, mode: int, r41: int, r46: int, r52: int, pcount: int
    ) -> NoReturn:
        """The first problem of a kernel node's fixed fields (called only when there is one)."""
        label = _label(where, i, NodeType.KERNEL)
        if func >= self.function_count:
            _fail(off + 8, f"{label} function index", f"{func} is not below the function count {self.function_count}")
        if mode > 1:
            _fail(off + 40, f"{label} argument mode", f"{mode}, must be 0 (kernelParams) or 1 (extra)")
        if r41:
            _fail(off + 41, f"{label} reserved", "must be zero")
        if r46:
            _fail(off + 46, f"{label} reserved", "must be zero")
        if r52:
            _fail(off + 52, f"{label} reserved", "must be zero")
        _fail(off + 42, f"{label} parameter count", f"{pcount}, must be 0 with an extra buffer")

    def kernel(self, off: int, size: int, where: str, i: int) -> KernelNode:
        # SAVE's hot loop (one call per kernel node): checks are inline, messages built only on failure.
        mv = self.mv
        if size < L.KERNEL_HEAD_SIZE:
            label = _label(where, i, NodeType.KERNEL)
            _fail(off + 4, f"{label} record size", f"{size}, a kernel node needs at least 56")
        (func, gx, gy, gz, bx, by, bz, shared, mode, r41, pcount, acount, r46, bsize, r52) = L.KERNEL_FIXED.unpack_from(
            mv, off + 8
        )
        if func >= self.function_count or mode > 1 or r41 or r46 or r52 or (mode == 1 and pcount):
            self.kernel_header_fail(off, i, where, func, mode, r41, r46, r52, pcount)
        params_at = off + L.KERNEL_HEAD_SIZE
        attrs_at = params_at + pcount * L.PARAM_SIZE
        args_at = attrs_at + acount * L.ATTR_SIZE
        pad_at = args_at + bsize
        end = off + size
        if L.pad8(pad_at - off) != size:
            _fail(
                off + 4,
                f"{_label(where, i, NodeType.KERNEL)} record size",
                f"{size}, but {pcount} parameters, {acount} launch attributes and a {bsize}-byte "
                f"argument buffer need {L.pad8(pad_at - off)}",
            )
        params: tuple[tuple[int, int], ...] = ()
        if pcount:
            flat = L.params_struct(pcount).unpack_from(mv, params_at)
            params = tuple(zip(flat[0::2], flat[1::2], strict=True))
            if max(map(add, flat[0::2], flat[1::2])) > bsize:  # then find which, for the message
                for k, (poff, psize) in enumerate(params):
                    if poff + psize <= bsize:
                        continue
                    _fail(
                        params_at + k * L.PARAM_SIZE,
                        f"{_label(where, i, NodeType.KERNEL)} parameter {k}",
                        f"bytes {poff}..{poff + psize} lie outside the {bsize}-byte argument buffer",
                    )
        attrs: tuple[tuple[int, bytes], ...] = ()
        if acount:
            raw = L.ATTR.iter_unpack(mv[attrs_at:args_at])
            attrs = tuple((aid, value) for aid, reserved, value in raw if not reserved)
            if len(attrs) != acount:
                for k, (_aid, reserved, _value) in enumerate(L.ATTR.iter_unpack(mv[attrs_at:args_at])):
                    if reserved:
                        _fail(
                            attrs_at + k * L.ATTR_SIZE + 4,
                            f"{_label(where, i, NodeType.KERNEL)} launch attribute {k} reserved",
                            "must be zero",
                        )
        if pad_at != end and mv[pad_at:end] != _ZERO8[: end - pad_at]:
            _fail(pad_at, f"{_label(where, i, NodeType.KERNEL)} padding", "must be zero")
        return KernelNode(
            func,
            (gx, gy, gz),
            (bx, by, bz),
            shared,
            _ARG_MODES[mode],
            params,
            attrs,
            bytes(mv[args_at:pad_at]),
        )
