"""Graph record under random inputs: generated records round trip; truncated or bit-flipped bytes
either parse to a valid record (whose encoding is exactly those bytes) or raise an ArchiveError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.records import (
    ArgMode,
    ChildGraphNode,
    GraphRecord,
    KernelNode,
    MemcpyNode,
    MemsetNode,
    Node,
    NodeType,
    parse_record,
)
from foundry.records.nodes import Edge, EmptyNode, EventNode
from tests.support.encode import encode_record
from tests.support.samples import random_record, sample_record

U8 = st.integers(0, 0xFF)
U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFFFFFF)
U64 = st.integers(0, 2**64 - 1)
# No example database: these tests must not leave a .hypothesis directory in the checkout.
FAST = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_error(data: bytes) -> None:
    """The property every input must satisfy."""
    try:
        record = parse_record(data)
    except ArchiveError:
        return
    assert encode_record(record) == data


@st.composite
def kernels(draw: st.DrawFn, functions: int) -> KernelNode:
    args = draw(st.binary(max_size=40))
    mode = draw(st.sampled_from(ArgMode))
    params: list[tuple[int, int]] = []
    if mode == ArgMode.PARAMS:
        for _ in range(draw(st.integers(0, 4))):
            off = draw(st.integers(0, len(args)))
            params.append((off, draw(st.integers(0, len(args) - off))))
    attrs = draw(st.lists(st.tuples(U32, st.binary(min_size=64, max_size=64)), max_size=2))
    dim = st.tuples(U32, U32, U32)
    return KernelNode(
        draw(st.integers(0, functions - 1)),
        draw(dim),
        draw(dim),
        draw(U32),
        mode,
        tuple(params),
        tuple(attrs),
        args,
    )


def nodes(functions: int, events: int, depth: int) -> st.SearchStrategy[Node]:
    options: list[st.SearchStrategy[Node]] = [
        kernels(functions),
        st.builds(MemsetNode, U64, U64, U32, st.sampled_from((1, 2, 4)), U64, U64),
        st.builds(MemcpyNode, *([U64] * 15), U32, U32),
        st.builds(
            EventNode,
            st.sampled_from((NodeType.WAIT_EVENT, NodeType.EVENT_RECORD)),
            st.integers(0, events - 1),
        ),
        st.just(EmptyNode()),
    ]
    if depth < 2:
        options.append(st.builds(ChildGraphNode, records(functions, events, depth + 1)))
    return st.one_of(options)


@st.composite
def records(draw: st.DrawFn, functions: int = 0, events: int = 0, depth: int = 0) -> GraphRecord:
    top = depth == 0
    if top:
        functions, events = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    node_list = draw(st.lists(nodes(functions, events, depth), max_size=5 if top else 3))
    n = len(node_list)
    edges: list[Edge] = []
    if n:
        index = st.integers(0, n - 1)
        edges = draw(st.lists(st.builds(Edge, index, index, U8, U8, U8), max_size=6))
    record = GraphRecord(tuple(node_list), tuple(edges), functions if top else 0, events if top else 0)
    if top:
        # A record may not declare more events than its event nodes could use (a reader bounds every
        # count by the bytes present): such a draw is not a record.
        try:
            encode_record(record)
        except ValueError as exc:
            assume("events cannot be used" not in str(exc))
    return record


@pytest.mark.slow
@FAST
@given(records())
def test_generated_records_round_trip(record: GraphRecord) -> None:
    data = encode_record(record)
    assert parse_record(data) == record
    assert encode_record(parse_record(data)) == data


def test_truncation_at_every_length_is_rejected() -> None:
    data = encode_record(sample_record())
    for length in range(len(data)):
        cut = data[:length]
        try:
            parse_record(cut)
        except ArchiveCorruptError:
            pass
        else:
            raise AssertionError(f"truncation to {length} bytes was accepted")
        if length >= 32:
            # Make the header agree with the shorter length, so the node walk itself must notice.
            patched = bytearray(cut)
            struct.pack_into("<Q", patched, 24, length)
            try:
                parse_record(bytes(patched))
            except ArchiveCorruptError:
                continue
            raise AssertionError(f"truncation to {length} bytes with a matching total was accepted")


def test_every_single_byte_flip() -> None:
    data = encode_record(sample_record())
    for pos in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(data)
            flipped[pos] ^= mask
            parse_or_error(bytes(flipped))


@pytest.mark.slow
@FAST
@given(st.data())
def test_random_multi_byte_corruption(data: st.DataObject) -> None:
    record = data.draw(records())
    raw = bytearray(encode_record(record))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(U8)
    parse_or_error(bytes(raw))


@FAST
@given(st.binary(max_size=200))
def test_arbitrary_bytes_after_a_valid_header(tail: bytes) -> None:
    header = struct.pack("<4sHHIIIIQ", b"FGR1", 1, 32, 3, 1, 2, 2, 32 + len(tail))
    parse_or_error(header + tail)


@settings(max_examples=30, deadline=None, database=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 10**6))
def test_flips_in_a_large_record(pos_seed: int, value_seed: int) -> None:
    raw = bytearray(encode_record(random_record(3, nodes=200)))
    raw[pos_seed % len(raw)] ^= 1 + value_seed % 255
    parse_or_error(bytes(raw))
