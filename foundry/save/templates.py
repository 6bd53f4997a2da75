"""Topology templates: graphs that differ only in node parameters share one template.

Two graphs can share an exec (members switched in with per-node parameter updates) only when their
node types, edges and edge data match, and every kernel node keeps its cluster shape and cooperative
mode (an exec cannot switch those: the driver answers CUDA_ERROR_INVALID_CLUSTER_SIZE). The template
key therefore covers the record's topology key plus each kernel's required cluster shape, a function
attribute the record does not hold. A member is stored as a delta: its values for every node that
varies anywhere in the group, so that applying one member's delta switches a shared exec to it from
any other member.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from foundry.errors import CodecError
from foundry.format import (
    ChildGraphNode,
    Delta,
    GraphMeta,
    GraphRecord,
    KernelNode,
    Node,
    TemplateRef,
    delta_bytes,
    iter_nodes,
    override_problem,
    parse_record,
    relative_path_problem,
    write_graph,
)
from foundry.native import codec

from .graph import SavedGraph

__all__ = ["GroupPlan", "plan_groups", "template_key", "write_member_deltas"]


def template_key(meta: GraphMeta, record: GraphRecord) -> str:
    """Topology key plus every kernel's compile-time cluster shape (its required cluster dimensions)."""
    h = hashlib.sha256(meta.topology.encode())
    shapes = [  # packed once per function
        struct.pack("<3i", a.required_cluster_width, a.required_cluster_height, a.required_cluster_depth)
        for a in (f.attrs for f in meta.functions)
    ]
    h.update(b"".join(shapes[n.function_index] for _, n in iter_nodes(record) if isinstance(n, KernelNode)))
    return h.hexdigest()


def _identity(node: Node, meta: GraphMeta) -> Any:
    """A comparable value of a node with function indices replaced by the functions themselves."""
    if isinstance(node, KernelNode):
        return (
            meta.functions[node.function_index], node.grid, node.block, node.shared_mem, node.arg_mode,
            node.params, node.attrs, node.args,
        )  # fmt: skip
    if isinstance(node, ChildGraphNode):
        return (tuple(_identity(n, meta) for n in node.record.nodes), node.record.edges)
    return node


def _same(a: Node, ma: GraphMeta, b: Node, mb: GraphMeta) -> bool:
    """``_identity(a, ma) == _identity(b, mb)`` without building the tuples: SAVE compares every node
    of every member with its template's, and kernel nodes mostly differ in their argument bytes,
    which are compared first."""
    if type(a) is KernelNode:
        return (
            type(b) is KernelNode
            and a.args == b.args
            and a.grid == b.grid
            and a.block == b.block
            and a.shared_mem == b.shared_mem
            and a.arg_mode == b.arg_mode
            and a.params == b.params
            and a.attrs == b.attrs
            and ma.functions[a.function_index] == mb.functions[b.function_index]
        )
    return bool(_identity(a, ma) == _identity(b, mb))


@dataclass(frozen=True)
class GroupPlan:
    """Indices into the saved-graph list: the template, its members, and the nodes that vary."""

    key: str
    template: int
    members: tuple[int, ...]
    varying: tuple[int, ...]


def _differing(template: tuple[GraphMeta, GraphRecord], member: tuple[GraphMeta, GraphRecord]) -> list[int] | None:
    """Top-level nodes whose parameters differ, or None when the member cannot be switched in."""
    (tm, tr), (mm, mr) = template, member
    out = []
    for i, (a, b) in enumerate(zip(tr.nodes, mr.nodes, strict=True)):
        if _same(a, tm, b, mm):
            continue
        if override_problem(a, b) is not None:
            return None
        out.append(i)
    return out


def _template_ref(template: SavedGraph, member: SavedGraph) -> str:
    """The template's JSON as the member's metadata names it: relative to the member's directory."""
    return os.path.relpath(template.json_path.resolve(), member.json_path.resolve().parent)


def _reachable(template: SavedGraph, member: SavedGraph) -> bool:
    """Whether a member can name this template: LOAD reads nothing outside a graph's own directory, so
    the template must lie at or below it (graphs of one directory always can)."""
    return relative_path_problem(_template_ref(template, member)) is None


def plan_groups(graphs: Sequence[SavedGraph]) -> list[GroupPlan]:
    """Groups in first-seen order; a graph that cannot join its key's group becomes a template itself."""
    parsed = [(g.meta, _parsed(g)[0]) for g in graphs]
    plans: list[GroupPlan] = []
    open_groups: dict[str, list[tuple[int, list[int], set[int]]]] = {}
    for i, (meta, record) in enumerate(parsed):
        key = template_key(meta, record)
        placed = False
        for template, members, varying in open_groups.get(key, []):
            if not _reachable(graphs[template], graphs[i]):
                continue
            diff = _differing(parsed[template], (meta, record))
            if diff is not None:
                members.append(i)
                varying.update(diff)
                placed = True
                break
        if not placed:
            open_groups.setdefault(key, []).append((i, [], set()))
    for key, groups in open_groups.items():
        for template, members, varying in groups:
            plans.append(GroupPlan(key, template, tuple(members), tuple(sorted(varying))))
    plans.sort(key=lambda p: p.template)
    return plans


def _verify(
    template: tuple[GraphMeta, GraphRecord], member: tuple[GraphMeta, GraphRecord], varying: Sequence[int]
) -> None:
    """With _verify_bytes, SAVE's proof that a member is its template plus its overrides: every node
    that does not vary equals the template's (functions compared by identity), and so do the edges."""
    (tm, tr), (mm, mr) = template, member
    overridden = set(varying)
    for i, (t, m) in enumerate(zip(tr.nodes, mr.nodes, strict=True)):
        if i not in overridden and not _same(t, tm, m, mm):
            raise CodecError(f"graph {mm.name!r} is not template {tm.name!r} plus its overrides at node {i}")
    if tr.edges != mr.edges:
        raise CodecError(f"graph {mm.name!r} and template {tm.name!r} differ in their edges")


def _parsed(graph: SavedGraph) -> tuple[GraphRecord, tuple[tuple[int, int], ...]]:
    """A saved graph's record parsed, and its top-level node spans (parsed again only if SAVE lost them)."""
    if graph.parsed is not None and graph.spans:
        return graph.parsed, graph.spans
    spans: list[tuple[int, int]] = []
    return parse_record(graph.record, spans), tuple(spans)


def _verify_bytes(
    payload: bytes, member: GraphRecord, raw: bytes, spans: Sequence[tuple[int, int]], varying: Sequence[int],
    template_sha: str,
) -> None:  # fmt: skip
    """The delta the native code wrote is exactly its header (naming the template and the member's
    function table) and, for exactly the varying nodes, the member record's own node records byte for
    byte: compared whole with the delta those bytes make, joined (no walk of either in Python)."""
    own = ((i, raw[spans[i][0] : spans[i][1]]) for i in varying)
    if payload != delta_bytes(template_sha, member.function_count, own):
        raise CodecError(
            "a member's delta is not its template's name, its function count and its own records of the group's "
            "varying nodes"
        )


def write_member_deltas(graphs: Sequence[SavedGraph], plans: Sequence[GroupPlan]) -> list[SavedGraph]:
    """Rewrites every member's files as a delta against its template; returns the updated list."""
    out = list(graphs)
    for plan in plans:
        template = graphs[plan.template]
        assert template.meta.record is not None
        tpair = (template.meta, _parsed(template)[0])
        for index in plan.members:
            member = graphs[index]
            parsed, spans = _parsed(member)
            mpair = (member.meta, parsed)
            # The member's own node records, copied byte for byte (C), then proven to be exactly those.
            payload = codec.delta_from_record(member.record, plan.varying, template.meta.record.sha256)
            tsha = template.meta.record.sha256
            _verify_bytes(payload, parsed, member.record, spans, plan.varying, tsha)
            _verify(tpair, mpair, plan.varying)
            # The delta's nodes are the member's own (just proven byte for byte), parsed already.
            delta = Delta(tsha, mpair[1].function_count, tuple((i, mpair[1].nodes[i]) for i in plan.varying))
            ref = TemplateRef(_template_ref(template, member), template.meta.record.sha256)
            meta = replace(member.meta, record=None, template=ref)
            written = write_graph(member.json_path, meta, payload, parsed=delta, durable=False)
            out[index] = SavedGraph(member.json_path, written, member.record, payload, parsed, spans)
    return out
