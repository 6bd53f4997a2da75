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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from foundry.archive import DeltaFacts, graph_files, write_graph
from foundry.errors import CodecError
from foundry.native import codec
from foundry.native.records import RecordComparison, compare_records
from foundry.records import delta_bytes
from foundry.schema import FunctionRef, GraphMeta, TemplateRef
from foundry.schema.jsonfields import relative_path_problem

from .beside import sha256_beside
from .graph import SavedGraph

__all__ = ["GroupPlan", "plan_groups", "template_key", "write_member_deltas"]


def template_key(graph: SavedGraph) -> str:
    """Topology key plus every kernel's compile-time cluster shape (its required cluster dimensions)."""
    meta = graph.meta
    h = hashlib.sha256(meta.topology.encode())
    shapes = [  # packed once per function
        struct.pack("<3i", a.required_cluster_width, a.required_cluster_height, a.required_cluster_depth)
        for a in (f.attrs for f in meta.functions)
    ]
    h.update(b"".join(shapes[f] for f in graph.scan.kernel_functions))
    return h.hexdigest()


@dataclass(frozen=True)
class GroupPlan:
    """Indices into the saved-graph list: the template, its members, and the nodes that vary."""

    key: str
    template: int
    members: tuple[int, ...]
    varying: tuple[int, ...]


class _Functions:
    """One number per distinct function (FunctionRef) over the graphs compared: the native comparison
    takes two records' kernels as the same function when their numbers are equal."""

    def __init__(self) -> None:
        self.numbers: dict[FunctionRef, int] = {}

    def of(self, meta: GraphMeta) -> list[int]:
        return [self.numbers.setdefault(f, len(self.numbers)) for f in meta.functions]


def _compare(template: SavedGraph, member: SavedGraph, functions: _Functions) -> RecordComparison:
    """The member's top-level nodes against the template's: byte for byte, functions by identity."""
    return compare_records(template.record, functions.of(template.meta), member.record, functions.of(member.meta))


def _differing(template: SavedGraph, member: SavedGraph, functions: _Functions) -> list[int] | None:
    """Top-level nodes whose parameters differ, or None when the member cannot be switched in: a node an
    exec cannot update differs (foundry.records.override_problem states the rule), or the edges are listed
    in another order (LOAD builds the template's and applies the member's nodes only)."""
    found = _compare(template, member, functions)
    if found.blocked is not None or not found.edges_equal:
        return None
    return list(found.differing)


def _template_ref(template: SavedGraph, member: SavedGraph) -> str:
    """The template's JSON as the member's metadata names it: relative to the member's directory."""
    return os.path.relpath(template.json_path.resolve(), member.json_path.resolve().parent)


def _reachable(template: SavedGraph, member: SavedGraph) -> bool:
    """Whether a member can name this template: LOAD reads nothing outside a graph's own directory, so
    the template must lie at or below it (graphs of one directory always can)."""
    return relative_path_problem(_template_ref(template, member)) is None


def plan_groups(graphs: Sequence[SavedGraph]) -> list[GroupPlan]:
    """Groups in first-seen order; a graph that cannot join its key's group becomes a template itself."""
    functions = _Functions()
    plans: list[GroupPlan] = []
    open_groups: dict[str, list[tuple[int, list[int], set[int]]]] = {}
    for i, graph in enumerate(graphs):
        key = template_key(graph)
        placed = False
        for template, members, varying in open_groups.get(key, []):
            if not _reachable(graphs[template], graph):
                continue
            diff = _differing(graphs[template], graph, functions)
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


def _verify(template: SavedGraph, member: SavedGraph, varying: Sequence[int], functions: _Functions) -> None:
    """With _verify_bytes, SAVE's proof that a member is its template plus its overrides: every node
    that does not vary equals the template's (functions compared by identity), and so do the edges."""
    found = _compare(template, member, functions)
    overridden = set(varying)
    stray = [i for i in found.differing if i not in overridden]
    if found.blocked is not None or stray:
        at = min(stray + ([found.blocked] if found.blocked is not None else []))
        raise CodecError(
            f"graph {member.meta.name!r} is not template {template.meta.name!r} plus its overrides at node {at}"
        )
    if not found.edges_equal:
        raise CodecError(f"graph {member.meta.name!r} and template {template.meta.name!r} differ in their edges")


def _verify_bytes(payload: bytes, member: SavedGraph, varying: Sequence[int], template_sha: str) -> None:
    """The delta the native code wrote is exactly its header (naming the template and the member's
    function table) and, for exactly the varying nodes, the member record's own node records byte for
    byte: compared whole with the delta those bytes make, joined (no walk of either in Python)."""
    raw, spans = memoryview(member.record), member.scan.spans
    own = ((i, raw[spans[i][0] : spans[i][1]]) for i in varying)
    if payload != delta_bytes(template_sha, member.scan.function_count, own):
        raise CodecError(
            "a member's delta is not its template's name, its function count and its own records of the group's "
            "varying nodes"
        )


def write_member_deltas(
    graphs: Sequence[SavedGraph], plans: Sequence[GroupPlan], keep_files: Callable[[int], bool] = lambda i: True
) -> list[SavedGraph]:
    """Stores every member as a delta against its template: rewrites its files where ``keep_files(index)``
    says the graph stays in them, and otherwise only makes the delta and its metadata (the archive's graph
    bundle holds them: save/manifest.py); returns the updated list."""
    out = list(graphs)
    functions = _Functions()
    for plan in plans:
        template = graphs[plan.template]
        assert template.meta.record is not None
        tsha = template.meta.record.sha256
        for index in plan.members:
            member = graphs[index]
            # The member's own node records, copied byte for byte (C), then proven to be exactly those.
            payload = codec.delta_from_record(member.record, plan.varying, tsha)
            digest = sha256_beside(payload)  # while the delta is proven
            _verify_bytes(payload, member, plan.varying, tsha)
            _verify(template, member, plan.varying, functions)
            ref = TemplateRef(_template_ref(template, member), tsha)
            meta = replace(member.meta, record=None, template=ref)
            known = DeltaFacts(tsha, member.scan.function_count)
            if keep_files(index):
                written = write_graph(member.json_path, meta, payload, known, False, digest.result())
            else:
                written = graph_files(member.json_path, meta, payload, known, digest.result()).meta
            out[index] = replace(member, meta=written, delta=payload)
    return out
