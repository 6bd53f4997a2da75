"""SAVE's template grouping: functions numbered by identity across graphs' function tables
(``_Functions``), compared natively (``compare_records``) as the node identity says
(tests/support/node_identity.py), and the override rule SAVE and ``foundry verify`` share."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from foundry.native.records import compare_records, scan_record
from foundry.records import GraphRecord, KernelNode
from foundry.save import SavedGraph
from foundry.save.templates import _Functions, plan_groups, template_key
from tests.support.encode import encode_record
from tests.support.node_identity import comparison
from tests.support.node_identity import same as same_node
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


def test_grouping_numbers_functions_by_identity_across_function_tables() -> None:
    """SAVE numbers each distinct function once over all graphs (``_Functions``), so a record whose
    function table lists the same kernels in another order compares equal node for node, and one whose
    kernels name other functions differs exactly at its kernel nodes."""
    for seed in range(6):
        a = random_record(seed, nodes=300, functions=12)
        ma = sample_meta("a", a, IMAGES, ".")
        c, new_index = _permuted(a, seed)
        mc = dataclasses.replace(
            ma, functions=tuple(ma.functions[old] for old, _ in sorted(new_index.items(), key=lambda kv: kv[1]))
        )
        numbers = _Functions()
        same = compare_records(encode_record(a), numbers.of(ma), encode_record(c), numbers.of(mc))
        assert same.differing == () and same.blocked is None and same.edges_equal
        shifted = dataclasses.replace(ma, functions=ma.functions[1:] + ma.functions[:1])  # other kernels
        other = compare_records(encode_record(a), numbers.of(ma), encode_record(a), numbers.of(shifted))
        kernels = tuple(i for i, n in enumerate(a.nodes) if isinstance(n, KernelNode))
        assert other.blocked is None and other.differing == kernels and len(kernels) > 100
        for i in kernels[:20]:  # each one as the node identity says
            assert not same_node(a.nodes[i], ma.functions, a.nodes[i], shifted.functions)


def test_every_node_type_compares_as_its_identity() -> None:
    record = sample_record()
    meta = sample_meta("s", record, IMAGES, ".")
    numbers = _Functions()
    data = encode_record(record)
    outcomes = []
    for functions in (meta.functions, meta.functions[::-1]):  # kernels name the same, then other functions
        other = dataclasses.replace(meta, functions=functions)
        found = compare_records(data, numbers.of(meta), data, numbers.of(other))
        expected = comparison(record, meta.functions, record, other.functions)
        assert (found.differing, found.blocked, found.edges_equal) == expected
        outcomes.append(expected[1])
    # The same functions: nothing differs. Other ones: a child graph holding kernels blocks its switch.
    assert outcomes[0] is None and outcomes[1] is not None


def test_override_rule_shared_by_save_and_verify() -> None:
    from foundry.records import override_problem
    from foundry.records.nodes import EmptyNode
    from tests.support.samples import kernel

    plain, other_args = kernel(0, (1,), (2,)), kernel(1, (3,), (4, 5))
    clustered = kernel(0, (1,), (2,), cluster=(2, 1, 1))
    assert override_problem(plain, other_args) is None  # arguments, grid, function: an exec updates them
    assert "launch attributes" in (override_problem(plain, clustered) or "")
    assert "keep the node's type" in (override_problem(plain, EmptyNode()) or "")
    assert "cannot update" in (override_problem(EmptyNode(), EmptyNode()) or "")


def _saved(path: Path, record: GraphRecord) -> SavedGraph:
    data = encode_record(record)
    return SavedGraph(path, sample_meta(path.stem, record, IMAGES, "."), data, scan_record(data))


def test_a_graph_with_its_edges_listed_in_another_order_gets_a_template_of_its_own(tmp_path: Path) -> None:
    """The topology key sorts the edges, so such graphs share a key; LOAD builds a member from its
    template's record, edge list included, so the member must list them as the template does."""
    record = random_record(5, nodes=200, functions=8)
    assert len(record.edges) > 2
    reordered = dataclasses.replace(record, edges=tuple(reversed(record.edges)))
    graphs = [_saved(tmp_path / "a.json", record), _saved(tmp_path / "b.json", reordered)]
    assert template_key(graphs[0]) == template_key(graphs[1])
    assert [(p.template, p.members) for p in plan_groups(graphs)] == [(0, ()), (1, ())]
    same = [_saved(tmp_path / "a.json", record), _saved(tmp_path / "c.json", record)]
    assert [(p.template, p.members) for p in plan_groups(same)] == [(0, (1,))]
