"""The native comparison of two records' top-level nodes (csrc/record_scan.c, ``compare_records``) against
the node identity SAVE's grouping must follow (tests/support/node_identity.py) and ``override_problem``:
on random pairs of records, on the real GPU archive's template and member, and on bad input."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from foundry.archive import read_graph
from foundry.errors import ArchiveCorruptError
from foundry.native.records import compare_records
from foundry.records import (
    ChildGraphNode,
    GraphRecord,
    KernelNode,
    MemcpyNode,
    MemsetNode,
    Node,
    parse_delta,
    parse_record,
)
from foundry.records.nodes import EmptyNode, EventNode
from tests.support.encode import encode_record
from tests.support.node_identity import comparison
from tests.support.random_records import mutations, random_attr, random_graph, random_kernel
from tests.support.samples import sample_record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"


def _changed(node: Node, rng: random.Random, functions: int, events: int) -> Node:
    """Another value of the node: mostly what a member varies, sometimes what no exec can switch."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice((EmptyNode(), MemsetNode(0, 0, 0, 1, 1, 1), random_kernel(rng, functions)))
    if isinstance(node, KernelNode):
        if roll < 0.4:
            return dataclasses.replace(node, function_index=rng.randrange(functions))
        if roll < 0.6 and node.args:
            return dataclasses.replace(node, args=bytes(len(node.args)) if any(node.args) else b"\1" * len(node.args))
        if roll < 0.7:
            return dataclasses.replace(node, grid=(node.grid[0] ^ 1, *node.grid[1:]))
        if roll < 0.8:
            return dataclasses.replace(node, attrs=(*node.attrs, random_attr(rng)))
        return random_kernel(rng, functions)
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
