"""The ``templates`` check of ``foundry verify``: template members are their template plus overrides.

A member's ``.cugraph`` holds a delta (foundry.records.delta): the node records that differ from its
template. LOAD builds the member as the template's graph with those nodes replaced, so the delta must
name the template's current record, override only kernel, memset and memcpy nodes that exist in the
template (each with one of its own type and the template's launch attributes, which an exec cannot
switch), and the result must have the topology the member's metadata records. The manifest's groups
must agree: a member's template is its group's, and its overrides are the group's ``varying`` nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from foundry.archive import Manifest, template_path
from foundry.errors import ArchiveError
from foundry.records import GraphRecord, override_problem

from .findings import Findings, GraphUnderCheck
from .graph import check_template, check_template_path
from .report import Check, ProblemKind

__all__ = ["attach_templates", "check_groups"]

Reader = Callable[[Path], "GraphUnderCheck | None"]


def attach_templates(
    graphs: list[GraphUnderCheck], found: Findings, read: Reader, known: dict[Path, GraphUnderCheck | None]
) -> None:
    """Finds each member's template (in ``known``, resolved path -> graph or None when unreadable, else
    through ``read``, whose result is added to ``known``), checks the member's delta against it, and
    sets ``template`` and ``applied`` on the members that pass."""
    for graph in graphs:
        if graph.delta is not None:
            _attach(graph, known, found, read)


def _attach(graph: GraphUnderCheck, by_path: dict[Path, GraphUnderCheck | None], found: Findings, read: Reader) -> None:
    meta, delta = graph.meta, graph.delta
    assert meta.template is not None and delta is not None

    def problem(kind: ProblemKind, message: str) -> None:
        found.add(Check.TEMPLATES, kind, graph.json_path, f"{graph.label}: {message}")

    tpath = template_path(graph.json_path, meta)
    try:
        check_template_path(graph.json_path, tpath)  # LOAD's rules for a member and its template (gate/graph.py)
    except ArchiveError as exc:
        found.refuse(Check.TEMPLATES, graph.json_path, exc)
        return
    if tpath not in by_path:
        by_path[tpath] = read(tpath)
    template = by_path[tpath]
    if template is None:
        problem(ProblemKind.MISSING, f"its template {tpath} cannot be read (see the files check); LOAD would fail")
        return
    try:
        check_template(graph.json_path, meta, tpath, template.meta)
    except ArchiveError as exc:
        found.refuse(Check.TEMPLATES, graph.json_path, exc)
        return
    assert template.record is not None
    if delta.template_sha256 != meta.template.record_sha256:  # the delta's own header: LOAD's native codec checks it
        problem(
            ProblemKind.MISMATCH,
            f"its delta was made against template record {delta.template_sha256}, its metadata names "
            f"{meta.template.record_sha256}",
        )
        return
    nodes = template.record.nodes
    sound = True
    for index, node in delta.overrides:
        if index >= len(nodes):
            problem(ProblemKind.CORRUPT, f"its delta overrides node {index}; the template has {len(nodes)} nodes")
            sound = False
            continue
        reason = override_problem(nodes[index], node)
        if reason is not None:
            problem(ProblemKind.MISMATCH, f"its delta replaces node {index}, {reason}")
            sound = False
    if not sound:
        return
    overrides = dict(delta.overrides)
    applied = tuple(overrides.get(i, n) for i, n in enumerate(nodes))
    graph.template = template
    graph.applied = GraphRecord(
        applied, template.record.edges, template.record.function_count, template.record.event_count
    )


def check_groups(
    manifest: Manifest,
    manifest_path: Path,
    graphs: list[GraphUnderCheck | None],
    found: Findings,
) -> None:
    """The manifest's groups against the graphs: templates hold their own record, each member stored
    as a delta is stored against its group's template and overrides exactly the group's ``varying``
    nodes (where the manifest records them)."""
    for gi, group in enumerate(manifest.groups):
        template = graphs[group.template]
        if template is not None and template.delta is not None:
            found.add(
                Check.TEMPLATES,
                ProblemKind.MISMATCH,
                template.json_path,
                f"{template.label}: the manifest makes it the template of group {gi}, but it is stored as changes "
                "to another graph",
            )
        tpath = template.json_path.resolve() if template is not None else None
        known = group.varying is not None
        varying = sorted(set(group.varying or ()))
        deltas = unread = 0
        for index in group.members:
            member = graphs[index]
            unread += member is None
            if member is None or member.delta is None or member.meta.template is None:
                continue
            deltas += 1
            stored_against = template_path(member.json_path, member.meta)
            if tpath is not None and stored_against != tpath:
                found.add(
                    Check.TEMPLATES,
                    ProblemKind.MISMATCH,
                    member.json_path,
                    f"{member.label}: the manifest puts it in group {gi}, whose template is graph {group.template}, "
                    f"but it is stored as changes to {stored_against}",
                )
            overridden = sorted(member.overridden)
            if known and overridden != varying:
                found.add(
                    Check.TEMPLATES,
                    ProblemKind.MISMATCH,
                    member.json_path,
                    f"{member.label}: its delta overrides nodes {overridden}, but the manifest says nodes {varying} "
                    f"vary in group {gi}; SAVE stores every member of a group with the same overrides",
                )
        if known and varying and not deltas and not unread:
            found.add(
                Check.TEMPLATES,
                ProblemKind.MISMATCH,
                manifest_path,
                f"the manifest says nodes {varying} vary in group {gi}, but no member of it is stored as a delta",
            )
