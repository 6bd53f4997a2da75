"""The native record scan (csrc/record_scan.c) against the Python reader it stands in for: ``scan_record``
accepts exactly the records ``parse_record`` accepts, refusing at the same byte, and derives the same
counts, spans, kernel functions and topology material, on random records, their damaged copies, the samples
and the real GPU archive; damaged records are scanned and compared cleanly under sanitizers. The
comparison's own tests are in test_record_compare.py."""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
import struct
from pathlib import Path

import pytest

from foundry.archive import read_graph
from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.native.records import COUNT_KEYS, scan_record
from foundry.records import (
    ArgMode,
    ChildGraphNode,
    GraphRecord,
    KernelNode,
    NodeType,
    iter_nodes,
    node_counts,
    parse_record,
    topology_key,
)
from foundry.records import layout as L
from foundry.records.layout import RecHeader, RecNode
from foundry.records.nodes import Edge, EmptyNode, LaunchAttr
from foundry.records.walk import TOPOLOGY_KEY_VERSION
from tests.support.encode import encode_record
from tests.support.random_records import mutations, random_graph
from tests.support.samples import random_record, sample_record
from tests.support.sanitized import SKIPS, Sanitized

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"
_BYTE = re.compile(r"^graph record, byte (\d+),")


# ------------------------------------------------------------------ the scan against parse_record
def assert_scan_agrees(data: bytes) -> bool:
    """scan_record accepts ``data`` iff parse_record does, refusing at the byte parse_record names, and then
    reports what the parsed record holds. Returns whether it was accepted."""
    spans: list[tuple[int, int]] = []
    try:
        parsed = parse_record(data, spans)
    except ArchiveError as exc:
        with pytest.raises(ArchiveCorruptError, match=r"^graph record, byte \d+, ") as refused:
            scan_record(data)
        expected = _BYTE.match(str(exc))
        if expected:
            assert _BYTE.match(str(refused.value)).group(1) == expected.group(1), (exc, refused.value)  # type: ignore[union-attr]
        return False
    scan = scan_record(data)
    top = (parsed.function_count, parsed.event_count, len(parsed.nodes), len(parsed.edges))
    assert (scan.function_count, scan.event_count, scan.node_count, scan.edge_count) == top
    assert scan.counts == node_counts(parsed)
    assert tuple(scan.counts) == COUNT_KEYS
    assert scan.spans == tuple(spans)
    assert scan.kernel_functions == tuple(n.function_index for _, n in iter_nodes(parsed) if isinstance(n, KernelNode))
    children = any(isinstance(n, ChildGraphNode) for n in parsed.nodes)
    assert scan.children == children
    if children:
        assert scan.topology is None
    else:
        assert scan.topology is not None
        assert hashlib.sha256(TOPOLOGY_KEY_VERSION + scan.topology).hexdigest() == topology_key(parsed)
    return True


def test_scan_agrees_with_the_parser_on_random_records_and_their_damage() -> None:
    rng = random.Random(1234)
    accepted = refused = children = 0
    for _ in range(250):
        record, data = random_graph(rng)
        assert assert_scan_agrees(data)
        children += any(isinstance(n, ChildGraphNode) for n in record.nodes)
        for damaged in mutations(data, rng, 16):
            if assert_scan_agrees(damaged):
                accepted += 1
            else:
                refused += 1
    assert children > 30 and accepted > 500 and refused > 1500  # every outcome well exercised


def test_scan_agrees_with_the_parser_on_samples_and_the_real_archive() -> None:
    _meta, real = read_graph(FIXTURE / "ew_bs64.json")
    records = [real, encode_record(sample_record()), encode_record(random_record(7, nodes=200))]
    rng = random.Random(99)
    for data in records:
        assert assert_scan_agrees(data)
        for damaged in mutations(data, rng, 300):
            assert_scan_agrees(damaged)
    for at in range(len(real)):  # every byte of the real record, flipped
        damaged = bytearray(real)
        damaged[at] ^= 0xFF
        assert_scan_agrees(bytes(damaged))


def test_topology_material_is_the_walk_packing() -> None:
    """Cooperative launches, cluster shapes (the last repeated attribute wins) and unsorted edges with ports."""
    coop = (LaunchAttr.COOPERATIVE, struct.pack("<I", 5).ljust(64, b"\0"))
    off = (LaunchAttr.COOPERATIVE, bytes(64))
    cluster = (LaunchAttr.CLUSTER_DIMENSION, struct.pack("<3I", 2, 1, 1).ljust(64, b"\xee"))
    later = (LaunchAttr.CLUSTER_DIMENSION, struct.pack("<3I", 4, 2, 1).ljust(64, b"\0"))
    base = KernelNode(0, (1, 1, 1), (1, 1, 1), 0, ArgMode.EXTRA, (), (), b"")
    nodes = (
        dataclasses.replace(base, attrs=(coop, cluster, later)),
        dataclasses.replace(base, attrs=(off, coop, off)),
        EmptyNode(),
        base,
    )
    edges = (Edge(3, 0, 1, 0, 1), Edge(0, 1), Edge(0, 1, 0, 0, 1), Edge(2, 3))
    record = GraphRecord(nodes, edges, function_count=1)
    scan = scan_record(encode_record(record))
    assert scan.topology is not None and hashlib.sha256(b"FTK1" + scan.topology).hexdigest() == topology_key(record)
    assert scan.topology[8:22] == struct.pack("<BB3I", NodeType.KERNEL, 1, 4, 2, 1)


def _nested(depth: int) -> bytes:
    """A record whose one node holds child graphs nested ``depth`` deep, built byte by byte (the encoder
    refuses more than the format allows)."""
    data = b""
    for level in range(depth + 1):
        child = RecNode(type=NodeType.GRAPH, reserved0=0, reserved1=0, bytes=L.NODE_HEAD_SIZE + len(data))
        nodes = child.pack() + data if level else b""
        head = RecHeader(
            magic=L.RECORD_MAGIC, version=L.RECORD_VERSION, header_bytes=L.HEADER_SIZE, node_count=int(level > 0),
            edge_count=0, function_count=0, event_count=0, total_bytes=L.HEADER_SIZE + len(nodes),
        )  # fmt: skip
        data = head.pack() + nodes
    return data


def test_nesting_limit_is_the_parsers() -> None:
    assert assert_scan_agrees(_nested(L.MAX_DEPTH))
    assert scan_record(_nested(L.MAX_DEPTH)).counts["child_graph"] == L.MAX_DEPTH
    assert not assert_scan_agrees(_nested(L.MAX_DEPTH + 1))
    with pytest.raises(ArchiveCorruptError, match=f"nested more than {L.MAX_DEPTH} deep"):
        scan_record(_nested(L.MAX_DEPTH + 1))


def test_scan_refuses_short_and_foreign_data_and_takes_any_buffer() -> None:
    data = encode_record(sample_record())
    for cut in range(len(data)):
        with pytest.raises(ArchiveCorruptError, match=r"^graph record, byte \d+, "):
            scan_record(data[:cut])
    with pytest.raises(ArchiveCorruptError, match="not a Foundry graph record"):
        scan_record(b"ELF\0" + data[4:])
    expected = scan_record(data)
    assert scan_record(bytearray(data)) == expected == scan_record(memoryview(data))
    assert scan_record(memoryview(b"xx" + data)[2:]) == expected


DAMAGED_UNDER_SANITIZERS = """
import random
from tests.support.random_records import mutations, random_graph
from foundry.errors import ArchiveCorruptError
from foundry.native.records import compare_records, scan_record
rng = random.Random(11)
ids, scanned, compared = [0] * 256, 0, 0
for _ in range(40):
    _record, data = random_graph(rng)
    for damaged in mutations(data, rng, 25):
        for buffer in (damaged, bytearray(damaged)):
            try:
                scan_record(buffer)
                scanned += 1
            except ArchiveCorruptError:
                pass
            try:
                compare_records(buffer, ids, data, ids)
                compared += 1
            except (ArchiveCorruptError, ValueError):
                pass
out(scanned=scanned, compared=compared)
"""


@SKIPS[0]
@SKIPS[1]
def test_damaged_records_are_read_cleanly_under_sanitizers(sanitized: Sanitized) -> None:
    """Every byte read lies inside the buffer given (Python's own allocator off, so that AddressSanitizer
    sees each buffer's end), and no undefined behaviour, for damaged records scanned and compared."""
    got = sanitized.run(DAMAGED_UNDER_SANITIZERS, env={"PYTHONMALLOC": "malloc"})
    assert got["scanned"] > 100 and got["compared"] > 100
