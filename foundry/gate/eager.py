"""The gate run eagerly (``foundry verify``): every rule on every file of an archive, or of the graphs given,
without a GPU (docs/TRUST.md).

``verify_archive(path)`` checks an archive directory, or one graph's ``.json`` and what it references, and
returns a ``Report``: one ``Problem`` per defect, grouped by the check that found it (``Check``), and the
checks that could not run with the reason. It never raises for archive content, never imports torch or a
native module, and reads every file of the archive once.

Every file LOAD reads is read here by LOAD's own functions, in LOAD's order (the manifest, proven under a key;
images; each graph as load/source.py reads it; documents; the region hint), and what one refuses is reported
with LOAD's very message (``Findings.refuse``); where LOAD stops at the first refusal, this reads on. Then the
rules that need more than LOAD reads in Python (the record's structure and counts, kernels and their parameters
in the images, carried variables, templates' overrides, pointers, the manifest's region against its graphs',
foreign files), whose refusals LOAD meets later in the driver or never.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from foundry.archive import MANIFEST_NAME, Manifest, manifest_document, resolve_archive_dir
from foundry.errors import ArchiveError
from foundry.schema import Identity
from foundry.storage import PathLike
from foundry.trust import KEY_ENV, KeySource, SigningKey, as_key, signature_key_id

from .cachefiles import check_caches
from .files import (
    check_bundle,
    check_consistency,
    check_documents,
    check_image_file,
    check_images_dir,
    check_listed_values,
    check_memory,
    check_variable_files,
    read_graph_files,
    read_listed_graphs,
)
from .findings import Findings, GraphUnderCheck, ImageInfo
from .foreign import check_foreign, known_files
from .graph import graph_store
from .identity import check_identity, identity_details
from .kernels import check_functions, check_image_formats, check_manifest_kernels
from .manifests import archive_manifest, manifests_read_once, no_manifest
from .params import check_kernel_params, note_unchecked
from .pointers import scan_graph
from .region import check_manifest_region, check_region_hint
from .report import Check, CheckResult, Problem, Report
from .signature import check_signature
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
    with manifests_read_once():  # each manifest read once, as LOAD reads it for a batch of graphs
        graphs, images = _verify_directory(target, None if key is None else as_key(key), current_identity, found)
    return _report(str(target), "archive", found, graphs, images)


def verify_graphs(
    paths: Iterable[PathLike], key: KeySource | None = None, current_identity: Identity | None = None
) -> Report:
    """``verify_archive`` in graph mode for the graph JSONs at ``paths`` together: each graph with its
    template, images, state memory and carried module variables, each read once, and checked against
    the manifest of its archive where there is one, read as LOAD reads them under ``key``. LOAD's pre-GPU
    checks made all at once (foundry.load.preflight) are this."""
    targets = [Path(p) for p in paths]
    found = Findings()
    with manifests_read_once():
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


def _read_manifest(directory: Path, key: SigningKey | None, found: Findings) -> Manifest | None:
    """The manifest as LOAD's start-up reads it (gate/manifests.py): present (under a key, its absence is the
    signature's refusal), sealed and of a known version, signed with ``key`` where one is given, then valid.
    A signature refused is reported and the rest read on; None where the rest cannot be read."""
    path = directory / MANIFEST_NAME
    if key is not None and not os.path.lexists(path):
        found.refuse(Check.SIGNATURE, directory, no_manifest(directory, key))
        _skip_all(found, "the archive has no manifest")
        return None
    try:
        doc = manifest_document(directory)
    except ArchiveError as exc:
        found.refuse(Check.FILES, directory, exc)
        _skip_all(found, "the manifest cannot be read")
        return None
    if key is None:
        found.skip(Check.SIGNATURE, _no_key(signature_key_id(doc)))
    else:
        try:
            check_signature(doc, key, str(path))
        except ArchiveError as exc:
            found.refuse(Check.SIGNATURE, path, exc)
    try:
        return Manifest.from_json(doc, str(path))
    except ArchiveError as exc:
        found.refuse(Check.FILES, directory, exc)
        _skip_all(found, "the manifest cannot be read")
        return None


def _verify_directory(
    directory: Path, key: SigningKey | None, identity: Identity | None, found: Findings
) -> tuple[int, int]:
    manifest_path = directory / MANIFEST_NAME
    manifest = _read_manifest(directory, key, found)
    if manifest is None:
        return 0, 0
    check_region_hint(directory, manifest, found)  # before the region is reserved, as LOAD's start-up
    images: dict[str, ImageInfo] = {}
    for image in manifest.images:
        images[image.sha256] = check_image_file(directory, image.sha256, image.bytes, found)
    # Graphs as LOAD reads them without a key: the signature, checked above, is the manifest's alone, and a
    # graph is checked against the manifest whatever the signature says, so that every problem is reported.
    store = graph_store(None)
    bundle_sound = check_bundle(directory, manifest, store, found)
    listed = read_listed_graphs(directory, manifest, found, store, bundle_sound)
    check_documents(directory, manifest, key, found)
    cache_files = check_caches(directory, manifest, key, found)
    readable = [g for g in listed if g is not None]
    known: dict[Path, GraphUnderCheck | None] = {
        Path(os.path.normpath(directory / e.json)).resolve(): g for e, g in zip(manifest.graphs, listed, strict=True)
    }
    extra: list[GraphUnderCheck] = []

    def read_unlisted(path: Path) -> GraphUnderCheck | None:
        graph = read_graph_files(path, found, store)
        if graph is not None:
            extra.append(graph)
        return graph

    attach_templates(readable, found, read_unlisted, known)
    for graph in readable:
        check_consistency(graph, found)
    check_groups(manifest, manifest_path, listed, found)
    _check_rest(readable, images, found, (directory, manifest))
    check_manifest_kernels(manifest_path, {e.sha256: e for e in manifest.images}, images, found)
    if len(readable) < len(listed):
        found.note(f"{len(listed) - len(readable)} graph(s) could not be read; later checks skipped them")
    check_manifest_region(manifest, manifest_path, readable, found)
    check_foreign(directory, known_files(directory, manifest, [*readable, *extra]) | cache_files, found)
    # Graphs first: LOAD names the graph; the manifest says more only where no graph read holds its identity.
    sources = [*_graph_identities(readable), (manifest_path, "the archive's manifest", manifest.identity)]
    _check_identity(sources, identity, found)
    return len(manifest.graphs), len(images)


def _check_rest(
    graphs: list[GraphUnderCheck],
    images: dict[str, ImageInfo],
    found: Findings,
    manifest: tuple[Path, Manifest] | None,
) -> None:
    """State memory, carried variables, kernels and pointers of every graph read (and in archive mode, the
    ``manifest`` of the archive at that directory: the variables its start-up writes)."""
    seen: set[str] = set()
    for graph in graphs:
        check_memory(graph, found, seen)
    carried: set[str] = set()
    if manifest is not None:  # written by LOAD's start-up, before any graph is read
        check_listed_values(manifest[0], manifest[1], found, carried)
    for graph in graphs:
        check_variable_files(graph, found, carried)
    listed = {e.sha256: e for e in manifest[1].images} if manifest is not None else None
    declared = {ref.sha256: ref.format for g in graphs for ref in g.meta.images}
    if listed is not None:
        declared.update({sha: e.format for sha, e in listed.items()})
    check_image_formats(images, declared, found)
    for graph in graphs:
        check_functions(graph, images, listed, found)
    unchecked = [check_kernel_params(graph, images, found) for graph in graphs]
    note_unchecked(sum(u[0] for u in unchecked), sum(u[1] for u in unchecked), found)
    listing = (manifest[0] / MANIFEST_NAME, manifest[1].images) if manifest is not None else None
    check_variables(graphs, images, found, listing)
    for graph in graphs:
        scan_graph(graph, found)


def _verify_graphs(
    json_paths: list[Path], key: SigningKey | None, identity: Identity | None, found: Findings
) -> tuple[int, int]:
    known: dict[Path, GraphUnderCheck | None] = {}
    named: list[GraphUnderCheck] = []
    store = graph_store(key)  # LOAD's, under the key given
    for json_path in json_paths:
        here = json_path.resolve()
        if here not in known:
            graph = read_graph_files(json_path, found, store, key)
            known[here] = graph
            if graph is not None:
                named.append(graph)
    if not named:
        _skip_all(found, "no graph can be read")
        return 0, 0
    read = list(named)

    def read_template(path: Path) -> GraphUnderCheck | None:
        template = read_graph_files(path, found, store, key)
        if template is not None:
            read.append(template)
        return template

    attach_templates(named, found, read_template, known)
    for g in read:  # templates too: LOAD builds each member from its template's record
        check_consistency(g, found)
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
            check_images_dir(found, images, directory, wanted)
    _check_rest(read, images, found, None)
    found.skip(Check.FOREIGN, "only an archive directory is checked for foreign files")
    _check_identity(_graph_identities(read), identity, found)
    _skip_graph_signature(read, key, found)
    return len(named), len(images)  # the graphs named: a member's template is read for it, not counted


def _manifest_beside(directory: Path) -> Manifest | None:
    """The manifest of a graph's archive, or None where there is none or it cannot be read (which reading the
    graph reported)."""
    try:
        return archive_manifest(directory, None)
    except (ArchiveError, OSError):
        return None


def _graph_identities(graphs: list[GraphUnderCheck]) -> list[tuple[Path, str, Identity]]:
    return [(g.json_path, f"graph {g.meta.name!r}", g.meta.identity) for g in graphs]


def _check_identity(sources: Iterable[tuple[Path, str, Identity]], current: Identity | None, found: Findings) -> None:
    """The identity rule (gate/identity.py) for each distinct identity, named by the first file that holds it, as
    LOAD names the first graph of each that it builds."""
    if current is None:
        found.skip(Check.IDENTITY, "no identity of the current machine was given")
        return
    seen: set[Identity] = set()
    for path, what, saved in sources:
        if saved in seen:
            continue
        seen.add(saved)
        try:
            check_identity(what, saved, current)
        except ArchiveError as exc:
            found.refuse(Check.IDENTITY, path, exc, identity_details(saved, current))


def _no_key(signed_with: str | None) -> str:
    state = f"the manifest is signed with key {signed_with}" if signed_with else "the manifest is unsigned"
    return f"no key given (--key FILE, or ${KEY_ENV}); {state}"


def _skip_graph_signature(graphs: list[GraphUnderCheck], key: SigningKey | None, found: Findings) -> None:
    """Without a key, why the signature check is skipped (with one, reading each graph proved it listed in its
    archive's signed manifest, as LOAD proves it)."""
    if key is not None:
        return
    try:
        signed_with = signature_key_id(manifest_document(resolve_archive_dir(graphs[0].json_path, graphs[0].meta)))
    except ArchiveError:
        found.skip(Check.SIGNATURE, f"no key given (--key FILE, or ${KEY_ENV}); the archive has no readable manifest")
        return
    found.skip(Check.SIGNATURE, _no_key(signed_with))


def check_archive(archive_dir: PathLike) -> list[Problem]:
    """Every problem ``verify_archive`` finds in ``archive_dir`` (no identity or signature checks),
    in the order found; empty when the archive is sound. Reads and hashes the whole archive."""
    return list(verify_archive(archive_dir).problems)
