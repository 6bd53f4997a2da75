"""SAVE's node comparison for template grouping (``_same``) agrees with comparing the nodes'
identities (``_identity``: nodes with function indices replaced by the functions), on random records
and on the sample record with every node type."""

from __future__ import annotations

import dataclasses
import random

from foundry.format import GraphRecord, KernelNode
from foundry.save.templates import _identity, _same
from tests.support.samples import random_record, sample_meta, sample_record

IMAGES = (b"\x7fELF image a", b"\x7fELF image b")


def _permuted(record: GraphRecord, seed: int) -> tuple[GraphRecord, dict[int, int]]:
    """The record with its function table renumbered: the same kernels under other indices."""
    order = list(range(record.function_count))
    random.Random(seed).shuffle(order)
    new_index = {old: new for new, old in enumerate(order)}
    nodes = tuple(
        dataclasses.replace(n, function_index=new_index[n.function_index]) if isinstance(n, KernelNode) else n
        for n in record.nodes
    )
    return dataclasses.replace(record, nodes=nodes), new_index


def test_same_agrees_with_identity_on_random_records() -> None:
    checked = equal = 0
    for seed in range(6):
        a = random_record(seed, nodes=300, functions=12)
        b = random_record(seed + 100, nodes=300, functions=12)
        ma = sample_meta("a", a, IMAGES, ".")
        # The same record renumbered (its functions reordered to match): equal node for node.
        c, new_index = _permuted(a, seed)
        mc = dataclasses.replace(
            ma, functions=tuple(ma.functions[old] for old, _ in sorted(new_index.items(), key=lambda kv: kv[1]))
        )
        for other, mo in ((b, sample_meta("b", b, IMAGES, ".")), (c, mc), (a, ma)):
            for x, y in zip(a.nodes, other.nodes, strict=True):
                expected = _identity(x, ma) == _identity(y, mo)
                assert _same(x, ma, y, mo) == expected
                checked += 1
                equal += expected
    assert equal >= 2 * 6 * 300 and checked - equal > 1000  # both outcomes well exercised


def test_same_agrees_with_identity_on_every_node_type() -> None:
    record = sample_record()
    meta = sample_meta("s", record, IMAGES, ".")
    other_meta = dataclasses.replace(meta, functions=meta.functions[::-1])  # kernels now name other functions
    for x in record.nodes:
        for y in record.nodes:
            for mo in (meta, other_meta):
                assert _same(x, meta, y, mo) == (_identity(x, meta) == _identity(y, mo)), (x, y)


def test_override_rule_shared_by_save_and_verify() -> None:
    from foundry.format import override_problem
    from foundry.format.nodes import EmptyNode
    from tests.support.samples import kernel

    plain, other_args = kernel(0, (1,), (2,)), kernel(1, (3,), (4, 5))
    clustered = kernel(0, (1,), (2,), cluster=(2, 1, 1))
    assert override_problem(plain, other_args) is None  # arguments, grid, function: an exec updates them
    assert "launch attributes" in (override_problem(plain, clustered) or "")
    assert "keep the node's type" in (override_problem(plain, EmptyNode()) or "")
    assert "cannot update" in (override_problem(EmptyNode(), EmptyNode()) or "")
