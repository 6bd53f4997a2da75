"""``foundry verify``: everything that can be proven about an archive without a GPU (docs/TRUST.md).

``verify_archive(path)`` checks an archive directory, or one graph's ``.json`` and what it references,
and returns a ``Report``: one ``Problem`` per defect, grouped by the check that found it (``Check``),
and the checks that could not run with the reason. It never raises for archive content, never imports
torch or a native module, and reads every file of the archive once.

The checks, in order: ``files`` (checksums from the manifest down to records, deltas, images and state
memory; format versions; cross-references), ``foreign`` (files the archive does not account for),
``kernels`` (function tables against stored images), ``templates`` (members are their template plus
overrides), ``pointers`` (region addresses a graph uses lie in the memory LOAD maps), ``identity``
(against a given ``Identity`` of the current machine) and ``signature`` (against a given key).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundry.archive.graphfile import resolve_archive_dir
from foundry.archive.identity import Identity, compare
from foundry.archive.jsonfields import load_json
from foundry.archive.manifest import MANIFEST_NAME, read_manifest_doc
from foundry.archive.problems import Check, Problem, ProblemKind
from foundry.archive.signed_archive import authenticate_graph
from foundry.archive.signing import KEY_ENV, KeySource, SigningKey, as_key, check_signature, signature_key_id
from foundry.archive.verify_files import (
    check_consistency,
    check_image_file,
    check_images_dir,
    check_memory,
    read_graph_files,
    read_listed_graphs,
)
from foundry.archive.verify_foreign import check_foreign, known_files
from foundry.archive.verify_kernels import check_functions, check_image_formats, check_manifest_kernels
from foundry.archive.verify_pointers import scan_graph
from foundry.archive.verify_state import Findings, GraphUnderCheck, ImageInfo, kind_of
from foundry.archive.verify_templates import attach_templates, check_groups
from foundry.errors import ArchiveError, ArchiveSignatureError

__all__ = ["CheckResult", "Report", "check_archive", "verify_archive"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class CheckResult:
    """How one check went: ``status`` is ``"passed"``, ``"failed"`` (``problems`` > 0) or
    ``"skipped"`` (``reason`` says why)."""

    check: Check
    status: str
    problems: int
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check.value, "status": self.status, "problems": self.problems, "reason": self.reason}


@dataclass(frozen=True)
class Report:
    """The outcome of ``verify_archive``. ``target`` is the path checked, ``mode`` ``"archive"`` (a
    directory) or ``"graph"`` (one graph JSON); ``graphs``/``images`` count what was read."""

    target: str
    mode: str
    checks: tuple[CheckResult, ...]
    problems: tuple[Problem, ...]
    notes: tuple[str, ...]
    graphs: int
    images: int

    @property
    def ok(self) -> bool:
        """True when no check found a problem (skipped checks do not count against it)."""
        return not self.problems

    def problems_of(self, check: Check) -> list[Problem]:
        return [p for p in self.problems if p.check == check]

    @property
    def verdict(self) -> str:
        """One line: what passed, or how many problems which checks found."""
        skipped = [c.check.value for c in self.checks if c.status == "skipped"]
        tail = f"; skipped: {', '.join(skipped)}" if skipped else ""
        if self.ok:
            passed = sum(c.status == "passed" for c in self.checks)
            return f"OK: {self.target} passed {passed} checks{tail}"
        failed = [f"{c.check.value} ({c.problems})" for c in self.checks if c.status == "failed"]
        count = len(self.problems)
        return f"FAILED: {count} problem{'s' if count != 1 else ''} in {self.target}: {', '.join(failed)}{tail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "mode": self.mode,
            "ok": self.ok,
            "verdict": self.verdict,
            "graphs": self.graphs,
            "images": self.images,
            "checks": [c.to_json() for c in self.checks],
            "problems": [p.to_json() for p in self.problems],
            "notes": list(self.notes),
        }


def verify_archive(path: PathLike, key: KeySource | None = None, current_identity: Identity | None = None) -> Report:
    """Checks the archive directory ``path`` (or its ``graph_manifest.json``, or the one graph whose
    ``.json`` it is, with its template, images and state memory) and returns the report.

    ``key`` (a ``SigningKey``, its bytes or its file): check that the manifest is signed with it and,
    for one graph, that the signed manifest lists the graph's JSON as it is now; without it the
    signature check is skipped (the environment is not read here). ``current_identity``: compare the
    identity each graph was saved with against it; without it the identity check is skipped. An
    unreadable key file raises ``ArchiveSignatureError``; nothing else is raised for archive content.
    """
    target = Path(path)
    if target.name == MANIFEST_NAME and target.is_file():  # the manifest stands for its archive
        target = target.parent
    signing_key = None if key is None else as_key(key)
    found = Findings()
    if target.is_dir():
        mode = "archive"
        graphs, images = _verify_directory(target, signing_key, current_identity, found)
    else:
        mode = "graph"
        graphs, images = _verify_graph(target, signing_key, current_identity, found)
    checks = []
    for check in Check:
        count = sum(p.check == check for p in found.problems)
        if count:
            checks.append(CheckResult(check, "failed", count))
        elif check in found.skipped:
            checks.append(CheckResult(check, "skipped", 0, found.skipped[check]))
        else:
            checks.append(CheckResult(check, "passed", 0))
    return Report(str(target), mode, tuple(checks), tuple(found.problems), tuple(found.notes), graphs, images)


def _skip_all(found: Findings, reason: str) -> None:
    for check in Check:
        if check != Check.FILES:
            found.skip(check, reason)


def _verify_directory(
    directory: Path, key: SigningKey | None, identity: Identity | None, found: Findings
) -> tuple[int, int]:
    manifest_path = directory / MANIFEST_NAME
    try:
        manifest, doc = read_manifest_doc(directory)
    except ArchiveError as exc:
        found.add(Check.FILES, kind_of(exc), directory, str(exc))
        _skip_all(found, "the manifest cannot be read")
        return 0, 0
    except OSError as exc:
        found.add(Check.FILES, ProblemKind.MISSING, directory, f"cannot read the manifest: {exc}")
        _skip_all(found, "the manifest cannot be read")
        return 0, 0
    images: dict[str, ImageInfo] = {}
    for image in manifest.images:
        images[image.sha256] = check_image_file(directory / image.file, image.sha256, image.bytes, found)
    listed = read_listed_graphs(directory, manifest, found)
    readable = [g for g in listed if g is not None]
    known: dict[Path, GraphUnderCheck | None] = {
        (directory / e.json).resolve(): g for e, g in zip(manifest.graphs, listed, strict=True)
    }
    extra: list[GraphUnderCheck] = []

    def read_unlisted(path: Path) -> GraphUnderCheck | None:
        found.add(
            Check.TEMPLATES,
            ProblemKind.MISMATCH,
            path,
            "graphs of the archive are stored as changes to this template, but the manifest does not list it",
        )
        graph = read_graph_files(path, f"template {path.name}", found)
        if graph is not None:
            extra.append(graph)
        return graph

    attach_templates(readable, found, read_unlisted, known)
    for graph in readable:
        check_consistency(graph, found, directory)
    check_groups(manifest, manifest_path, listed, found)
    listed_images = {e.sha256: e for e in manifest.images}
    _check_rest(readable, images, found, listed_images)
    check_manifest_kernels(manifest_path, listed_images, images, found)
    if len(readable) < len(listed):
        found.note(f"{len(listed) - len(readable)} graph(s) could not be read; later checks skipped them")
    check_foreign(directory, known_files(directory, manifest, [*readable, *extra]), found)
    _check_identity(
        [(manifest_path, manifest.identity)] + [(g.json_path, g.meta.identity) for g in readable], identity, found
    )
    _check_manifest_signature(manifest_path, doc, key, found)
    return len(manifest.graphs), len(images)


def _check_rest(
    graphs: list[GraphUnderCheck], images: dict[str, ImageInfo], found: Findings, listed: dict[str, Any] | None
) -> None:
    """State memory, kernels and pointers of every graph read."""
    seen: set[str] = set()
    for graph in graphs:
        check_memory(graph, found, seen)
    declared = {ref.sha256: ref.format for g in graphs for ref in g.meta.images}
    if listed is not None:
        declared.update({sha: e.format for sha, e in listed.items()})
    check_image_formats(images, declared, found)
    for graph in graphs:
        check_functions(graph, images, listed, found)
    for graph in graphs:
        scan_graph(graph, found)


def _verify_graph(
    json_path: Path, key: SigningKey | None, identity: Identity | None, found: Findings
) -> tuple[int, int]:
    graph = read_graph_files(json_path, f"graph {json_path.name}", found)
    if graph is None:
        _skip_all(found, "the graph cannot be read")
        return 0, 0
    graph.label = f"graph {graph.meta.name!r}"
    read: list[GraphUnderCheck] = [graph]

    def read_template(path: Path) -> GraphUnderCheck | None:
        template = read_graph_files(path, f"template {path.name}", found)
        if template is not None:
            template.label = f"template {template.meta.name!r}"
            read.append(template)
        return template

    attach_templates([graph], found, read_template, {json_path.resolve(): graph})
    check_consistency(graph, found)
    images: dict[str, ImageInfo] = {}
    for g in read:
        wanted = {ref.sha256: ref.bytes for ref in g.meta.images}
        check_images_dir(found, images, resolve_archive_dir(g.json_path, g.meta), wanted, f"{g.label}'s metadata")
    _check_rest(read, images, found, None)
    found.skip(Check.FOREIGN, "only an archive directory is checked for foreign files")
    _check_identity([(g.json_path, g.meta.identity) for g in read], identity, found)
    _check_graph_signature(read, key, found)
    return len(read), len(images)


def _check_identity(sources: Iterable[tuple[Path, Identity]], current: Identity | None, found: Findings) -> None:
    if current is None:
        found.skip(Check.IDENTITY, "no identity of the current machine was given")
        return
    seen: set[Identity] = set()
    for path, saved in sources:
        if saved in seen:
            continue
        seen.add(saved)
        for m in compare(saved, current):
            details = (("field", m.field), ("saved", m.saved), ("current", m.current))
            found.add(Check.IDENTITY, ProblemKind.IDENTITY, path, m.message, details)


def _no_key(signed_with: str | None) -> str:
    state = f"the manifest is signed with key {signed_with}" if signed_with else "the manifest is unsigned"
    return f"no key given (--key FILE, or ${KEY_ENV}); {state}"


def _check_manifest_signature(path: Path, doc: Any, key: SigningKey | None, found: Findings) -> None:
    if key is None:
        found.skip(Check.SIGNATURE, _no_key(signature_key_id(doc)))
        return
    try:
        check_signature(doc, key, str(path))
    except ArchiveSignatureError as exc:
        found.add(Check.SIGNATURE, ProblemKind.SIGNATURE, path, str(exc))


def _check_graph_signature(graphs: list[GraphUnderCheck], key: SigningKey | None, found: Findings) -> None:
    if key is None:
        manifest = resolve_archive_dir(graphs[0].json_path, graphs[0].meta) / MANIFEST_NAME
        try:
            signed_with = signature_key_id(load_json(manifest.read_bytes(), str(manifest)))
        except (OSError, ArchiveError):
            found.skip(
                Check.SIGNATURE, f"no key given (--key FILE, or ${KEY_ENV}); the archive has no readable manifest"
            )
            return
        found.skip(Check.SIGNATURE, _no_key(signed_with))
        return
    for graph in graphs:
        try:
            authenticate_graph(graph.json_path, graph.meta, key, graph.json_sha256)
        except ArchiveSignatureError as exc:
            found.add(Check.SIGNATURE, ProblemKind.SIGNATURE, graph.json_path, str(exc))
        except ArchiveError as exc:
            found.add(Check.FILES, kind_of(exc), graph.json_path, f"{graph.label}: the archive's manifest: {exc}")


def check_archive(archive_dir: PathLike) -> list[Problem]:
    """Every problem ``verify_archive`` finds in ``archive_dir`` (no identity or signature checks),
    in the order found; empty when the archive is sound. Reads and hashes the whole archive."""
    return list(verify_archive(archive_dir).problems)
