"""The specification of SAVE's node comparison for template grouping, in Python: two nodes are the same
when they are equal with each function index replaced by the function it names. The native comparison
(foundry.native.compare_records) must decide exactly as this does (tests/cpu/test_record_compare.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from foundry.records import ChildGraphNode, GraphRecord, KernelNode, Node, override_problem


def identity(node: Node, functions: Sequence[Any]) -> Any:
    """A comparable value of a node with function indices replaced by ``functions[index]``."""
    if isinstance(node, KernelNode):
        return (
            functions[node.function_index], node.grid, node.block, node.shared_mem, node.arg_mode,
            node.params, node.attrs, node.args,
        )  # fmt: skip
    if isinstance(node, ChildGraphNode):
        return (tuple(identity(n, functions) for n in node.record.nodes), node.record.edges)
    return node


def same(a: Node, a_functions: Sequence[Any], b: Node, b_functions: Sequence[Any]) -> bool:
    return bool(identity(a, a_functions) == identity(b, b_functions))


def comparison(
    a: GraphRecord, a_functions: Sequence[Any], b: GraphRecord, b_functions: Sequence[Any]
) -> tuple[tuple[int, ...], int | None, bool]:
    """What SAVE's grouping must decide of two records' top-level nodes, as (differing, blocked,
    edges_equal): ``same`` per node, and for the first that differs where an exec could not switch it
    (``override_problem``) blocked at that node, with nothing differing."""
    differing = []
    for i, (x, y) in enumerate(zip(a.nodes, b.nodes, strict=True)):
        if same(x, a_functions, y, b_functions):
            continue
        if override_problem(x, y) is not None:
            return (), i, a.edges == b.edges
        differing.append(i)
    return tuple(differing), None, a.edges == b.edges
