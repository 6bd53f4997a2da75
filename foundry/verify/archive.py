"""``foundry verify``: everything that can be proven about an archive without a GPU (docs/TRUST.md).

``verify_archive(path)`` checks an archive directory, or one graph's ``.json`` and what it references,
and returns a ``Report``: one ``Problem`` per defect, grouped by the check that found it (``Check``),
and the checks that could not run with the reason. It never raises for archive content, never imports
torch or a native module, and reads every file of the archive once.

The checks, in order: ``files`` (checksums from the manifest down to records, deltas, images, state
memory, carried module variables and documents; format versions; cross-references), ``foreign`` (files the
archive does not account for), ``kernels`` (function tables against stored images, kernel nodes' parameters
against their kernels' as the images state them), ``variables``
(carried module variables against their images, the manifest and each other), ``templates`` (members
are their template plus overrides), ``pointers`` (region addresses a graph uses lie in the memory LOAD
maps), ``identity`` (against a given ``Identity`` of the current machine) and ``signature`` (against a
given key).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from foundry.errors import ArchiveError, ArchiveSignatureError
from foundry.format import (
    MANIFEST_NAME,
    GraphStore,
    Identity,
    Manifest,
    PathLike,
    compare,
    manifest_if_any,
    read_manifest_doc,
    real_name,
    resolve_archive_dir,
)
from foundry.trust import KEY_ENV, KeySource, SigningKey, as_key, authenticate_graph, check_signature, signature_key_id

from .caches import check_caches
from .documents import check_documents
from .files import (
    check_bundle,
    check_consistency,
    check_image_file,
    check_images_dir,
    check_memory,
    check_variable_files,
    read_graph_files,
    read_listed_graphs,
)
from .findings import Findings, GraphUnderCheck, ImageInfo, kind_of
from .foreign import check_foreign, known_files
from .kernels import check_functions, check_image_formats, check_manifest_kernels
from .params import check_kernel_params, note_unchecked
from .pointers import scan_graph
from .region import check_manifest_region, check_region_hint
from .report import Check, CheckResult, Problem, ProblemKind, Report
from .templates import attach_templates, check_groups
from .variables import check_variables

__all__ = ["check_archive", "verify_archive", "verify_graphs"]


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
    if not target.is_dir():
        return verify_graphs([target], key, current_identity)
    found = Findings()
    graphs, images = _verify_directory(target, None if key is None else as_key(key), current_identity, found)
    return _report(str(target), "archive", found, graphs, images)


def verify_graphs(
    paths: Iterable[PathLike], key: KeySource | None = None, current_identity: Identity | None = None
) -> Report:
    """``verify_archive`` in graph mode for the graph JSONs at ``paths`` together: each graph with its
    template, images, state memory and carried module variables, each read once, and checked against
    the manifest of its archive where there is one. This is the one set of rules LOAD's pre-GPU checks
    apply too (foundry.load.preflight)."""
    targets = [Path(p) for p in paths]
    found = Findings()
    graphs, images = _verify_graphs(targets, None if key is None else as_key(key), current_identity, found)
    return _report(", ".join(str(t) for t in targets), "graph", found, graphs, images)


def _report(target: str, mode: str, found: Findings, graphs: int, images: int) -> Report:
    checks = []
    for check in Check:
        count = found.counts.get(check, 0)
        if count:
            checks.append(CheckResult(check, "failed", count))
        elif check in found.skipped:
            checks.append(CheckResult(check, "skipped", 0, found.skipped[check]))
        else:
            checks.append(CheckResult(check, "passed", 0))
    problems = (*found.problems, *found.summaries())
    return Report(target, mode, tuple(checks), problems, tuple(found.all_notes()), graphs, images)


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
        images[image.sha256] = check_image_file(directory, image.sha256, image.bytes, found)
    store = _store({real_name(directory): manifest})
    bundle_sound = check_bundle(directory, manifest, found)
    listed = read_listed_graphs(directory, manifest, found, store, bundle_sound)
    check_documents(directory, manifest, found)
    cache_files = check_caches(directory, manifest, found)
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
        graph = read_graph_files(path, f"template {path.name}", found, store)
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
    check_region_hint(directory, manifest, found)
    check_manifest_region(manifest, manifest_path, readable, found)
    check_foreign(directory, known_files(directory, manifest, [*readable, *extra]) | cache_files, found)
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
    carried: set[str] = set()
    for graph in graphs:
        check_variable_files(graph, found, carried)
    declared = {ref.sha256: ref.format for g in graphs for ref in g.meta.images}
    if listed is not None:
        declared.update({sha: e.format for sha, e in listed.items()})
    check_image_formats(images, declared, found)
    for graph in graphs:
        check_functions(graph, images, listed, found)
    unchecked = [check_kernel_params(graph, images, found) for graph in graphs]
    note_unchecked(sum(u[0] for u in unchecked), sum(u[1] for u in unchecked), found)
    check_variables(graphs, images, found)
    for graph in graphs:
        scan_graph(graph, found)


def _verify_graphs(
    json_paths: list[Path], key: SigningKey | None, identity: Identity | None, found: Findings
) -> tuple[int, int]:
    known: dict[Path, GraphUnderCheck | None] = {}
    named: list[GraphUnderCheck] = []
    store = _store({})
    for json_path in json_paths:
        here = json_path.resolve()
        if here not in known:
            graph = read_graph_files(json_path, f"graph {json_path.name}", found, store, signed=key is not None)
            known[here] = graph
            if graph is not None:
                named.append(graph)
    if not named:
        _skip_all(found, "no graph can be read")
        return 0, 0
    for graph in named:
        graph.label = f"graph {graph.meta.name!r}"
    read = list(named)

    def read_template(path: Path) -> GraphUnderCheck | None:
        template = read_graph_files(path, f"template {path.name}", found, store, signed=key is not None)
        if template is not None:
            template.label = f"template {template.meta.name!r}"
            read.append(template)
        return template

    attach_templates(named, found, read_template, known)
    for g in read:  # templates too: LOAD builds each member from its template's record
        check_consistency(g, found)
    if key is None:  # with a key, the signature check makes this check and more
        _check_listing(read, found)
    by_archive: dict[Path, list[GraphUnderCheck]] = {}
    for g in read:
        by_archive.setdefault(resolve_archive_dir(g.json_path, g.meta), []).append(g)
    images: dict[str, ImageInfo] = {}
    for directory, graphs in by_archive.items():
        manifest = _manifest_beside(directory)
        check_region_hint(directory, manifest, found)
        if manifest is not None:
            check_manifest_region(manifest, directory / MANIFEST_NAME, graphs, found)
        for g in graphs:
            wanted = {ref.sha256: ref.bytes for ref in g.meta.images}
            check_images_dir(found, images, directory, wanted, f"{g.label}'s metadata")
    _check_rest(read, images, found, None)
    found.skip(Check.FOREIGN, "only an archive directory is checked for foreign files")
    _check_identity([(g.json_path, g.meta.identity) for g in read], identity, found)
    _check_graph_signature(read, key, found)
    return len(named), len(images)  # the graphs named: a member's template is read for it, not counted


def _store(read: dict[str, Manifest]) -> GraphStore:
    """Where graphs' bytes are (foundry.format.stored), as LOAD finds them; ``read``: the manifests read
    already, by the real path of their directory (each is read once a run)."""

    def manifest_of(directory: Path) -> Manifest | None:
        real = real_name(directory)
        if real not in read:
            manifest = manifest_if_any(directory)
            if manifest is None:
                return None
            read[real] = manifest
        return read[real]

    return GraphStore(manifest_of)


def _manifest_beside(directory: Path) -> Manifest | None:
    """The manifest of a graph's archive, or None where there is none or it cannot be read (which the
    listing or signature check reports)."""
    try:
        return read_manifest_doc(directory)[0]
    except (ArchiveError, OSError):
        return None


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


def _check_listing(graphs: list[GraphUnderCheck], found: Findings) -> None:
    """As LOAD checks each graph before the GPU, key or no key: the manifest beside it (when its archive
    has one) lists it as it is, and agrees with it."""
    for graph in graphs:
        try:
            authenticate_graph(graph.json_path, graph.meta, None, graph.json_sha256)
        except ArchiveError as exc:
            found.add(Check.FILES, kind_of(exc), graph.json_path, f"{graph.label}: {exc}")


def _check_graph_signature(graphs: list[GraphUnderCheck], key: SigningKey | None, found: Findings) -> None:
    if key is None:
        try:
            signed_with = signature_key_id(
                read_manifest_doc(resolve_archive_dir(graphs[0].json_path, graphs[0].meta))[1]
            )
        except ArchiveError:
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
