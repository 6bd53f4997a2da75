"""The native record scan and comparison (csrc/record_scan.c) against the Python code they stand in for:
``scan_record`` accepts exactly the records ``parse_record`` accepts, refusing at the same byte, and derives
the same counts, spans, kernel functions and topology material; ``compare_records`` finds the nodes that
the node identity (tests/support/node_identity.py) and ``override_problem`` find, on random records, their
damaged copies and the real GPU archive's template and member."""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
import struct
from pathlib import Path

import pytest

from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.format import iter_nodes, node_counts, parse_delta, parse_record, topology_key
from foundry.format import layout as L
from foundry.format.graphfile import read_graph
from foundry.format.layout import RecHeader, RecNode
from foundry.format.nodes import (
    ArgMode,
    ChildGraphNode,
    Edge,
    EmptyNode,
    EventNode,
    GraphRecord,
    KernelNode,
    LaunchAttr,
    MemcpyNode,
    MemsetNode,
    Node,
    NodeType,
)
from foundry.format.walk import TOPOLOGY_KEY_VERSION
from foundry.native import compare_records, scan_record
from foundry.native.records import COUNT_KEYS
from tests.support.encode import encode_record
from tests.support.node_identity import comparison
from tests.support.samples import random_record, sample_record
from tests.support.sanitized import SKIPS, Sanitized

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"
_BYTE = re.compile(r"^graph record, byte (\d+),")


# ------------------------------------------------------------------ random records
def _attr(rng: random.Random) -> tuple[int, bytes]:
    aid = rng.choice((LaunchAttr.COOPERATIVE, LaunchAttr.CLUSTER_DIMENSION, LaunchAttr.PRIORITY, 77))
    words = [rng.choice((0, 1, 2, 0xFFFFFFFF)) for _ in range(3)]
    return aid, struct.pack("<3I", *words) + (rng.randbytes(52) if rng.random() < 0.3 else bytes(52))


def _kernel(rng: random.Random, functions: int) -> KernelNode:
    args = rng.randbytes(rng.choice((0, 4, 8, 13, 24, 40)))
    mode = rng.choice((ArgMode.PARAMS, ArgMode.PARAMS, ArgMode.EXTRA))
    params: list[tuple[int, int]] = []
    if mode == ArgMode.PARAMS:
        for _ in range(rng.randrange(5)):
            offset = rng.randint(0, len(args))
            params.append((offset, rng.randint(0, len(args) - offset)))
    attrs = tuple(_attr(rng) for _ in range(rng.choice((0, 0, 0, 1, 2, 3))))
    grid, block = ((rng.choice((1, 2, 64)), rng.choice((1, 0xFFFFFFFF)), 1) for _ in range(2))
    return KernelNode(rng.randrange(functions), grid, block, rng.choice((0, 1024)), mode, tuple(params), attrs, args)


def _node(rng: random.Random, functions: int, events: int, depth: int) -> Node:
    roll = rng.random()
    if roll < 0.4:
        return _kernel(rng, functions)
    if roll < 0.5:
        return MemsetNode(rng.getrandbits(64), rng.getrandbits(8), rng.getrandbits(32), rng.choice((1, 2, 4)), 64, 1)
    if roll < 0.6:
        return MemcpyNode(*(rng.getrandbits(64) for _ in range(15)), 2, rng.choice((1, 2)))
    if roll < 0.72 and events:
        return EventNode(rng.choice((NodeType.WAIT_EVENT, NodeType.EVENT_RECORD)), rng.randrange(events))
    if roll < 0.9 or depth >= 3:
        return EmptyNode()
    return ChildGraphNode(_graph(rng, functions, events, depth + 1))


def _graph(rng: random.Random, functions: int, events: int, depth: int) -> GraphRecord:
    nodes = tuple(_node(rng, functions, events, depth) for _ in range(rng.randint(0 if depth else 1, 7)))
    edges = tuple(
        Edge(rng.randrange(len(nodes)), rng.randrange(len(nodes)), rng.choice((0, 0, 1)), rng.choice((0, 2)),
             rng.choice((0, 0, 1)))
        for _ in range(rng.randrange(2 * len(nodes) + 1) if nodes else 0)
    )  # fmt: skip
    return GraphRecord(nodes, edges)


def random_graph(rng: random.Random) -> tuple[GraphRecord, bytes]:
    """A valid top-level record with every persisted node type, child graphs up to 3 deep, repeated and
    unusual launch attributes, and edge data; with its bytes."""
    while True:
        functions, events = rng.randint(1, 5), rng.randint(0, 2)
        record = dataclasses.replace(_graph(rng, functions, events, 0), function_count=functions, event_count=events)
        try:
            return record, encode_record(record)
        except ValueError:  # more events than a record this small can use: draw again
            continue


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


def _fields(data: bytes, start: int) -> list[tuple[int, int]]:
    """(offset, width) of every header, node and edge field of the record at ``start`` (child graphs' too)."""
    head = RecHeader.unpack_from(data, start)
    out = [(start + at, width) for at, width in ((4, 2), (6, 2), (8, 4), (12, 4), (16, 4), (20, 4), (24, 8))]
    off = start + L.HEADER_SIZE
    for _ in range(head.node_count):
        node = RecNode.unpack_from(data, off)
        out += [(off, 1), (off + 1, 1), (off + 4, 4)]
        if node.type == NodeType.KERNEL:
            out += [(off + at, w) for at, w in ((8, 4), (12, 4), (40, 1), (41, 1), (42, 2), (44, 2), (46, 2), (48, 4))]
            out += [(off + 52, 4), (off + node.bytes - 1, 1)]
            pcount = int.from_bytes(data[off + 42 : off + 44], "little")
            out += [(off + L.KERNEL_HEAD_SIZE + 4 * k, 4) for k in range(2 * pcount)]
            attrs = off + L.KERNEL_HEAD_SIZE + pcount * L.PARAM_SIZE
            for k in range(int.from_bytes(data[off + 44 : off + 46], "little")):
                out += [(attrs + k * L.ATTR_SIZE + at, 4) for at in (0, 4, 8)]  # id, reserved, value
        elif node.type == NodeType.MEMSET:
            out.append((off + 28, 4))
        elif node.type in (NodeType.WAIT_EVENT, NodeType.EVENT_RECORD):
            out += [(off + 8, 4), (off + 12, 4)]
        elif node.type == NodeType.GRAPH:
            out += _fields(data, off + L.NODE_HEAD_SIZE)
        off += node.bytes
    for j in range(head.edge_count):
        at = off + j * L.EDGE_SIZE
        out += [(at, 4), (at + 4, 4), (at + 8, 1), (at + 10, 1), (at + 11 + j % 5, 1)]
    return out


def mutations(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    """Damaged copies of a valid record: fields set to edge values, single bytes changed, cuts and growth."""
    fields = _fields(data, 0)
    out = []
    for _ in range(count):
        damaged = bytearray(data)
        roll = rng.random()
        if roll < 0.6:
            at, width = rng.choice(fields)
            old = int.from_bytes(data[at : at + width], "little")
            top = (1 << 8 * width) - 1
            near = (old + 1, old - 1, old + 8, old - 8, old + 16)
            new = rng.choice((0, 1, 2, 4, *near, top, rng.getrandbits(8 * width)))
            damaged[at : at + width] = (new & top).to_bytes(width, "little")
        elif roll < 0.9:
            at = rng.randrange(len(data))
            damaged[at] = rng.choice((damaged[at] ^ 1 << rng.randrange(8), 0, 0xFF, rng.getrandbits(8)))
        elif roll < 0.95:
            del damaged[rng.randrange(len(data)) :]
        else:
            damaged += bytes(rng.choice((1, 8, 16)))
            if rng.random() < 0.7:
                damaged[24:32] = len(damaged).to_bytes(8, "little")
        out.append(bytes(damaged))
    return out


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


# ------------------------------------------------------------------ the comparison against SAVE's rules
def _changed(node: Node, rng: random.Random, functions: int, events: int) -> Node:
    """Another value of the node: mostly what a member varies, sometimes what no exec can switch."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice((EmptyNode(), MemsetNode(0, 0, 0, 1, 1, 1), _kernel(rng, functions)))
    if isinstance(node, KernelNode):
        if roll < 0.4:
            return dataclasses.replace(node, function_index=rng.randrange(functions))
        if roll < 0.6 and node.args:
            return dataclasses.replace(node, args=bytes(len(node.args)) if any(node.args) else b"\1" * len(node.args))
        if roll < 0.7:
            return dataclasses.replace(node, grid=(node.grid[0] ^ 1, *node.grid[1:]))
        if roll < 0.8:
            return dataclasses.replace(node, attrs=(*node.attrs, _attr(rng)))
        return _kernel(rng, functions)
    if isinstance(node, MemsetNode):
        return dataclasses.replace(node, value=node.value ^ 1)
    if isinstance(node, MemcpyNode):
        return dataclasses.replace(node, width_bytes=node.width_bytes ^ 8)
    if isinstance(node, EventNode) and events > 1:
        return dataclasses.replace(node, event_index=(node.event_index + 1) % events)
    if isinstance(node, ChildGraphNode) and node.record.edges and roll < 0.4:
        edges = (*node.record.edges[:-1], dataclasses.replace(node.record.edges[-1], from_port=3))
        return ChildGraphNode(dataclasses.replace(node.record, edges=edges))
    if isinstance(node, ChildGraphNode) and node.record.nodes:
        k = rng.randrange(len(node.record.nodes))
        inner = list(node.record.nodes)
        inner[k] = _changed(inner[k], rng, functions, events)
        return ChildGraphNode(dataclasses.replace(node.record, nodes=tuple(inner)))
    return node


def _variant(record: GraphRecord, rng: random.Random) -> GraphRecord:
    """A member-like copy: some nodes changed, sometimes its function table resized or its edges moved."""
    functions = rng.choice((record.function_count, record.function_count + 1))
    nodes = list(record.nodes)
    for i in rng.sample(range(len(nodes)), rng.randint(0, min(3, len(nodes)))):
        nodes[i] = _changed(nodes[i], rng, record.function_count, record.event_count)
    edges = record.edges
    if rng.random() < 0.2 and edges:
        edges = edges[1:] if rng.random() < 0.5 else (*edges[:-1], dataclasses.replace(edges[-1], to_port=3))
    return GraphRecord(tuple(nodes), edges, functions, record.event_count)


def assert_compare_agrees(a: GraphRecord, a_ids: list[int], b: GraphRecord, b_ids: list[int]) -> tuple[object, ...]:
    got = compare_records(encode_record(a), a_ids, encode_record(b), b_ids)
    expected = comparison(a, a_ids, b, b_ids)
    assert (got.differing, got.blocked, got.edges_equal) == expected
    return expected


def test_compare_agrees_with_save_on_random_pairs() -> None:
    rng = random.Random(4321)
    outcomes = {"same": 0, "differing": 0, "blocked": 0, "edges": 0}
    for _ in range(400):
        record, _data = random_graph(rng)
        other = _variant(record, rng)
        try:
            encode_record(other)
        except ValueError:  # a changed event index beyond the table: not a record
            continue
        kinds = rng.choice((2, 3, 100))  # few identities: equal functions under other indices are common
        a_ids = [rng.randrange(kinds) for _ in range(record.function_count)]
        b_ids = a_ids[:] if rng.random() < 0.3 else [rng.randrange(kinds) for _ in range(other.function_count)]
        b_ids += [rng.randrange(kinds) for _ in range(other.function_count - len(b_ids))]
        differing, blocked, edges_equal = assert_compare_agrees(record, a_ids, other, b_ids)
        outcomes["blocked" if blocked is not None else "differing" if differing else "same"] += 1
        outcomes["edges"] += not edges_equal
        assert_compare_agrees(record, a_ids, record, a_ids)
    assert min(outcomes.values()) > 30, outcomes


def test_compare_finds_the_real_members_overrides() -> None:
    """The GPU archive's member, rebuilt from its template and delta, differs from the template exactly at
    its delta's nodes, with functions numbered by identity across the two function tables."""
    tmeta, template = read_graph(FIXTURE / "ew_bs64.json")
    mmeta, payload = read_graph(FIXTURE / "ew_bs32.json")
    delta, parsed = parse_delta(payload), parse_record(template)
    overrides = dict(delta.overrides)
    nodes = tuple(overrides.get(i, node) for i, node in enumerate(parsed.nodes))
    member = dataclasses.replace(parsed, nodes=nodes, function_count=delta.function_count)
    interned: dict[object, int] = {}
    t_ids = [interned.setdefault(f, len(interned)) for f in tmeta.functions]
    m_ids = [interned.setdefault(f, len(interned)) for f in mmeta.functions]
    got = compare_records(template, t_ids, encode_record(member), m_ids)
    assert got.differing == tuple(i for i, _ in delta.overrides) and got.blocked is None and got.edges_equal
    assert assert_compare_agrees(parsed, t_ids, member, m_ids)[0] == got.differing


def test_compare_names_bad_input_and_never_reads_past_it() -> None:
    record = sample_record()
    data = encode_record(record)
    ids = list(range(record.function_count))
    smaller = encode_record(dataclasses.replace(record, nodes=record.nodes[:-1], edges=()))
    with pytest.raises(ValueError, match="one node count"):
        compare_records(data, ids, smaller, ids)
    with pytest.raises(ValueError, match="function identities"):
        compare_records(data, [], data, [])
    with pytest.raises(ValueError, match="2\\*\\*32"):
        compare_records(data, [1 << 32] * len(ids), data, ids)
    for cut in (0, 8, 31, len(data) - 8):
        with pytest.raises(ArchiveCorruptError):
            compare_records(data[:cut], ids, data, ids)
    rng, many = random.Random(5), [0] * 256
    for _ in range(60):  # damaged bytes: an answer or a named error, never a crash or a read outside them
        record, data = random_graph(rng)
        for damaged in mutations(data, rng, 20):
            try:
                compare_records(damaged, many, data, many)
                compare_records(data, many, damaged, many)
            except (ArchiveCorruptError, ValueError):
                pass


DAMAGED_UNDER_SANITIZERS = """
import random
from tests.cpu.test_record_scan import mutations, random_graph
from foundry.errors import ArchiveCorruptError
from foundry.native import compare_records, scan_record
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
