"""Graph record: round trips, canonical encoding, strict validation, walks, speed."""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys

import pytest

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError
from foundry.records import (
    ArgMode,
    ChildGraphNode,
    GraphRecord,
    KernelNode,
    MemcpyNode,
    MemsetNode,
    NodeType,
    iter_nodes,
    kernel_pointer_words,
    node_counts,
    parse_record,
    topology_key,
)
from foundry.records.nodes import Edge, EmptyNode, EventNode, LaunchAttr
from tests.support.encode import encode_record
from tests.support.samples import REGION_BASE, kernel, random_record, sample_record
from tests.support.steps import steps


def roundtrip(record: GraphRecord) -> bytes:
    data = encode_record(record)
    assert len(data) % 8 == 0
    assert parse_record(data) == record
    assert encode_record(parse_record(data)) == data
    return data


NODES = [
    pytest.param(kernel(0, (REGION_BASE, REGION_BASE + 8), (1, 2, 3)), id="kernel-params"),
    pytest.param(kernel(0, (REGION_BASE,), (1,), extra=True), id="kernel-extra"),
    pytest.param(kernel(0, cooperative=True, cluster=(2, 2, 1)), id="kernel-attrs-no-args"),
    pytest.param(MemsetNode(REGION_BASE, 512, 0xFFFFFFFF, 1, 7, 3), id="memset"),
    pytest.param(MemcpyNode(*[*range(1, 16), 2, 2]), id="memcpy"),
    pytest.param(EventNode(NodeType.WAIT_EVENT, 1), id="event-wait"),
    pytest.param(EventNode(NodeType.EVENT_RECORD, 0), id="event-record"),
    pytest.param(EmptyNode(), id="empty"),
    pytest.param(ChildGraphNode(GraphRecord((EmptyNode(),), ())), id="child"),
    pytest.param(ChildGraphNode(GraphRecord((), ())), id="empty-child"),
]


@pytest.mark.parametrize("node", NODES)
def test_every_node_type_round_trips(node: object) -> None:
    record = GraphRecord((node, EmptyNode()), (Edge(0, 1), Edge(1, 0, 2, 0, 1)), 1, 2)  # type: ignore[arg-type]
    roundtrip(record)


def test_sample_record_round_trips_with_nested_children() -> None:
    record = sample_record()
    data = roundtrip(record)
    # node counts from the header
    magic, version, hsize, nodes, edges, funcs, events, total = struct.unpack_from("<4sHHIIIIQ", data)
    assert (magic, version, hsize, nodes, edges, funcs, events, total) == (
        b"FGR1",
        1,
        32,
        7,
        6,
        3,
        2,
        len(data),
    )
    child = record.nodes[4]
    assert isinstance(child, ChildGraphNode)
    assert isinstance(child.record.nodes[1], ChildGraphNode)


def test_empty_record_round_trips() -> None:
    assert roundtrip(GraphRecord((), ())) == struct.pack("<4sHHIIIIQ", b"FGR1", 1, 32, 0, 0, 0, 0, 32)


def test_kernel_layout_matches_format() -> None:
    node = KernelNode(
        3,
        (1, 2, 3),
        (4, 5, 6),
        7,
        ArgMode.PARAMS,
        ((0, 8), (8, 4)),
        ((LaunchAttr.COOPERATIVE, (1).to_bytes(4, "little") + bytes(60)),),
        bytes(range(12)),
    )
    data = roundtrip(GraphRecord((node,), (), 4, 0))
    k = data[32:]
    assert struct.unpack_from("<BBHI", k) == (0, 0, 0, 56 + 8 * 2 + 72 + 16)
    assert struct.unpack_from("<I3I3IIBBHHHII", k, 8) == (3, 1, 2, 3, 4, 5, 6, 7, 0, 0, 2, 1, 0, 12, 0)
    assert struct.unpack_from("<4I", k, 56) == (0, 8, 8, 4)
    assert struct.unpack_from("<II", k, 72) == (2, 0)
    assert k[72 + 72 : 72 + 72 + 12] == bytes(range(12))
    assert k[72 + 72 + 12 :] == bytes(4)  # zero padding


def test_fixed_node_sizes() -> None:
    for node, size in [
        (MemsetNode(1, 2, 3, 4, 5, 6), 48),
        (MemcpyNode(*range(17)), 136),
        (EventNode(NodeType.WAIT_EVENT, 0), 16),
        (EmptyNode(), 8),
    ]:
        events = 1 if isinstance(node, EventNode) else 0  # a record declares no event it has no node for
        data = encode_record(GraphRecord((node,), (), 0, events))  # type: ignore[arg-type]
        assert struct.unpack_from("<I", data, 36)[0] == size
        assert len(data) == 32 + size


def test_encoding_is_canonical_and_deterministic() -> None:
    a = encode_record(sample_record())
    b = encode_record(dataclasses.replace(sample_record()))
    assert a == b


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        (GraphRecord((kernel(5),), (), 2, 0), "function index"),
        (GraphRecord((EventNode(NodeType.WAIT_EVENT, 3),), (), 0, 1), "event index"),
        (GraphRecord((EmptyNode(),), (Edge(0, 1),)), "edge 0 to"),
        (GraphRecord((EventNode(NodeType.KERNEL, 0),), (), 0, 1), "node 0"),
        (GraphRecord((MemsetNode(0, 0, 0, 3, 1, 1),), ()), "element size"),
        (GraphRecord((MemsetNode(-1, 0, 0, 4, 1, 1),), ()), "out of range"),
        (GraphRecord((kernel(0, (1,)),), (), 0, 0), "function index"),
        (GraphRecord((dataclasses.replace(kernel(0, (1,)), params=((4, 8),)),), (), 1, 0), "parameter 0"),
        (
            GraphRecord((dataclasses.replace(kernel(0, (1,)), arg_mode=ArgMode.EXTRA),), (), 1, 0),
            "parameter count",
        ),
        (GraphRecord((dataclasses.replace(kernel(0), attrs=((2, b"x"),)),), (), 1, 0), "64"),
        (GraphRecord((ChildGraphNode(GraphRecord((), (), 1, 0)),), ()), "child record"),
        (GraphRecord(("not a node",), ()), "not a graph record node"),  # type: ignore[arg-type]
    ],
)
def test_encode_rejects_unrepresentable_records(record: GraphRecord, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        encode_record(record)


def test_wrong_magic_is_foreign_and_unknown_version_is_version_error() -> None:
    data = bytearray(encode_record(sample_record()))
    with pytest.raises(ArchiveForeignError, match="FGR1"):
        parse_record(b"PK\x03\x04" + bytes(data[4:]))
    data[4] = 2
    with pytest.raises(ArchiveVersionError, match="version 2"):
        parse_record(bytes(data))
    with pytest.raises(ArchiveCorruptError, match="truncated"):
        parse_record(b"FG")  # a prefix of the magic is a truncated record
    with pytest.raises(ArchiveCorruptError, match="truncated"):
        parse_record(b"")


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ((6, "<H", 40), "byte 6, record header size"),
        ((24, "<Q", 1000), "byte 24"),
        ((33, "<B", 1), "reserved"),
        ((36, "<I", 12), "record size"),
        ((40, "<I", 9), "function index: 9 is not below the function count 3"),
    ],
)
def test_corruption_messages_name_offset_and_field(patch: tuple[int, str, int], needle: str) -> None:
    data = bytearray(encode_record(sample_record()))
    offset, fmt, value = patch
    struct.pack_into(fmt, data, offset, value)
    with pytest.raises(ArchiveCorruptError, match=needle):
        parse_record(bytes(data))


def test_nonzero_padding_and_reserved_bytes_are_rejected() -> None:
    node = kernel(0, (), (1,))  # 4-byte argument buffer: 4 bytes of padding
    data = bytearray(encode_record(GraphRecord((node,), (), 1, 0)))
    data[-1] = 1
    with pytest.raises(ArchiveCorruptError, match="padding"):
        parse_record(bytes(data))
    data = bytearray(encode_record(GraphRecord((EmptyNode(), EmptyNode()), (Edge(0, 1),))))
    data[-1] = 1  # edge reserved
    with pytest.raises(ArchiveCorruptError, match="edge 0 reserved"):
        parse_record(bytes(data))


def test_child_graph_must_not_carry_tables() -> None:
    data = bytearray(encode_record(GraphRecord((ChildGraphNode(GraphRecord((), ())),), (), 0, 0)))
    struct.pack_into("<I", data, 32 + 8 + 16, 1)  # child function count
    with pytest.raises(ArchiveCorruptError, match="node 0 > child graph header function count"):
        parse_record(bytes(data))


def test_deep_nesting_is_refused_cleanly() -> None:
    record = GraphRecord((), ())
    for _ in range(70):
        record = GraphRecord((ChildGraphNode(record),), ())
    with pytest.raises(ValueError, match="nested deeper"):
        encode_record(record)
    # Build the bytes by hand: each level is header + node header around the next.
    inner = struct.pack("<4sHHIIIIQ", b"FGR1", 1, 32, 0, 0, 0, 0, 32)
    for _ in range(70):
        node = struct.pack("<BBHI", 4, 0, 0, 8 + len(inner)) + inner
        inner = struct.pack("<4sHHIIIIQ", b"FGR1", 1, 32, 1, 0, 0, 0, 32 + len(node)) + node
    with pytest.raises(ArchiveCorruptError, match="nested more than 64"):
        parse_record(inner)


def test_unpersistable_and_unknown_node_types() -> None:
    data = bytearray(encode_record(GraphRecord((EmptyNode(),), ())))
    data[32] = NodeType.HOST
    with pytest.raises(ArchiveCorruptError, match="HOST nodes cannot appear"):
        parse_record(bytes(data))
    data[32] = 200
    with pytest.raises(ArchiveCorruptError, match="unknown node type 200"):
        parse_record(bytes(data))


def test_parse_accepts_memoryview_bytearray_and_slices() -> None:
    data = encode_record(sample_record())
    assert parse_record(memoryview(b"xx" + data)[2:]) == sample_record()
    assert parse_record(bytearray(data)) == sample_record()


def test_iter_nodes_paths_and_counts() -> None:
    record = sample_record()
    paths = [path for path, _ in iter_nodes(record)]
    assert paths == [(0,), (1,), (2,), (3,), (4,), (4, 0), (4, 1), (4, 1, 0), (4, 1, 1), (4, 2), (5,), (6,)]
    assert node_counts(record) == {
        "nodes": 12,
        "edges": 9,
        "kernel": 4,
        "memcpy": 1,
        "memset": 1,
        "child_graph": 2,
        "empty": 2,
        "event_wait": 1,
        "event_record": 1,
    }
    assert node_counts(GraphRecord((), ()))["kernel"] == 0


def test_kernel_pointer_words() -> None:
    p = REGION_BASE
    node = kernel(0, (p, p + 16), (7, 8, 9))  # params at 0, 8 (8 bytes); 16, 20, 24 (4 bytes)
    assert list(kernel_pointer_words(node)) == [(0, 0, p), (1, 8, p + 16)]
    struct_param = KernelNode(
        0,
        (1, 1, 1),
        (1, 1, 1),
        0,
        ArgMode.PARAMS,
        ((4, 4), (8, 24)),
        (),
        bytes(8) + p.to_bytes(8, "little") + bytes(8) + (p + 1).to_bytes(8, "little"),
    )
    assert list(kernel_pointer_words(struct_param)) == [(1, 8, p), (1, 16, 0), (1, 24, p + 1)]
    extra = kernel(0, (p,), (1, 2, 3), extra=True)  # 20-byte buffer: words at 0 and 8 only
    assert list(kernel_pointer_words(extra)) == [(-1, 0, p), (-1, 8, 1 | 2 << 32)]


def test_topology_key_covers_shape_not_arguments() -> None:
    base = sample_record()
    key = topology_key(base)
    assert len(key) == 64 and key == topology_key(parse_record(encode_record(base)))

    def with_node(i: int, node: object) -> GraphRecord:
        nodes = list(base.nodes)
        nodes[i] = node  # type: ignore[call-overload]
        return dataclasses.replace(base, nodes=tuple(nodes))

    k0 = base.nodes[0]
    assert isinstance(k0, KernelNode)
    same = [
        with_node(0, dataclasses.replace(k0, function_index=2, grid=(1, 1, 1), args=bytes(len(k0.args)))),
        with_node(1, MemsetNode(0, 0, 0, 1, 1, 1)),
        with_node(3, EventNode(NodeType.WAIT_EVENT, 1)),
        dataclasses.replace(base, edges=tuple(reversed(base.edges))),
    ]
    for record in same:
        assert topology_key(record) == key
    different = [
        with_node(0, dataclasses.replace(k0, attrs=())),  # no longer cooperative
        with_node(5, kernel(2)),  # cluster dimension dropped
        with_node(6, MemsetNode(0, 0, 0, 1, 1, 1)),
        dataclasses.replace(base, edges=base.edges[:-1]),
        dataclasses.replace(base, edges=(*base.edges[:-1], Edge(5, 6, 1, 0, 0))),
        with_node(4, ChildGraphNode(GraphRecord((EmptyNode(),), ()))),
    ]
    keys = {topology_key(r) for r in different}
    assert key not in keys and len(keys) == len(different)


def test_parse_of_a_thousand_node_record_takes_a_bounded_number_of_steps_a_node() -> None:
    """Parsing is linear and cheap, counted in steps (tests/support/steps.py) rather than timed: some 75 a
    node, about 5 ms in all."""
    small, large = (steps(parse_record, encode_record(random_record(7, nodes=n)), budget=300 * n) for n in (1000, 2000))
    assert small < 150 * 1000, small
    assert large < 2.1 * small, (small, large)


def test_format_packages_import_nothing_native() -> None:
    code = (
        "import sys, foundry.records, foundry.images, foundry.schema, foundry.storage, foundry.archive\n"
        "import tests.support.samples\n"
        "FORMAT = ('foundry.records', 'foundry.images', 'foundry.schema', 'foundry.storage', 'foundry.archive',\n"
        "          'foundry.errors', 'foundry.version')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'cuda', 'ctypes', 'numpy')\n"
        "       or (m.startswith('foundry.')\n"
        "           and not m.startswith(FORMAT))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ((40, "<I", 7), "byte 40, node 0 \\(kernel\\) function index: 7 is not below the function count 1"),
        ((72, "<B", 2), "byte 72, node 0 \\(kernel\\) argument mode: 2, must be 0"),
        ((73, "<B", 1), "byte 73, node 0 \\(kernel\\) reserved"),
        ((78, "<H", 1), "byte 78, node 0 \\(kernel\\) reserved"),
        ((84, "<I", 1), "byte 84, node 0 \\(kernel\\) reserved"),
        ((72, "<B", 1), "byte 74, node 0 \\(kernel\\) parameter count: 2, must be 0 with an extra buffer"),
        ((100, "<I", 100), "byte 96, node 0 \\(kernel\\) parameter 1: bytes 8..108 lie outside the 16-byte"),
        ((80, "<I", 200), "byte 36, node 0 \\(kernel\\) record size"),
        ((108, "<I", 1), "byte 108, node 0 \\(kernel\\) launch attribute 0 reserved"),
        ((180, "<I", 1), "byte 180, node 0 \\(kernel\\) launch attribute 1 reserved"),
    ],
)
def test_kernel_node_corruption_names_offset_and_field(patch: tuple[int, str, int], needle: str) -> None:
    # Node 0 at byte 32: fixed fields at 40..87, two parameters at 88..103, two launch attributes at
    # 104..247 (reserved words at 108 and 180), a 16-byte argument buffer.
    node = kernel(0, (REGION_BASE, REGION_BASE + 8), (), cooperative=True, cluster=(2, 1, 1))
    data = bytearray(encode_record(GraphRecord((node,), (), 1, 0)))
    assert parse_record(bytes(data)).nodes == (node,)
    offset, fmt, value = patch
    struct.pack_into(fmt, data, offset, value)
    with pytest.raises(ArchiveCorruptError, match=needle):
        parse_record(bytes(data))
