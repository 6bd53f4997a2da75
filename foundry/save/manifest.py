"""SAVE's last step: the manifest. ``save_graph_manifest`` groups every graph this process saved into
topology templates, rewrites members as deltas, puts the graphs saved in the archive directory into its graph
bundle, and writes the manifest, the archive's commit point; then the bundled graphs' files go.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from foundry.archive import (
    BUNDLE_NAME,
    MANIFEST_NAME,
    DeltaFacts,
    GraphFiles,
    Manifest,
    container_path,
    graph_files,
    manifest_document,
    now_iso,
    write_bundle,
    write_manifest,
)
from foundry.errors import ArchiveError, ArchiveSignatureError, FoundryError, SaveError, VariableConflictError
from foundry.gate import check_signature
from foundry.region import region_spec, region_state
from foundry.schema import BundleRef, GraphEntry, GraphRole, GraphStorage, Group, ImageEntry, RecordRef
from foundry.storage import REGION_HINT, document_ref, sha256_bytes
from foundry.trust import KeySource, configured_key, sign_manifest
from foundry.version import __version__

from .beside import sync_beside
from .gcpause import gc_paused
from .graph import SavedGraph, replace_saved, save_phases, saved_graphs
from .templates import GroupPlan, plan_groups, write_member_deltas

__all__ = ["relist_documents", "save_graph_manifest"]


@gc_paused()
def save_graph_manifest(
    archive_dir: str | os.PathLike[str], signing_key: KeySource | None = None, documents: Sequence[str] = ()
) -> Manifest:
    """Writes ``graph_manifest.json`` for every graph this process saved, grouped into templates.

    Members of a topology group are rewritten as deltas against their template (each verified to be
    its template plus its overrides) before the manifest, which names them all, is written last.

    ``documents``: file names, in the archive directory, of documents written with
    ``write_archive_document`` (an engine plugin's metadata) that the manifest lists too, with their size
    and SHA-256, so that LOAD reads them only as listed (``read_archive_document``) and the seal and
    signature cover them (docs/FORMAT.md, "Documents"). One that is missing, not sealed or badly named
    raises ``SaveError`` before anything is written.

    With a signing key (``signing_key``, else the configured one: see foundry.trust.signing) the
    manifest carries an HMAC-SHA256 signature, which covers the whole archive (docs/TRUST.md). A key
    file that cannot be read raises ``ArchiveSignatureError`` before anything is written.
    """
    archive = Path(archive_dir)
    key = configured_key(signing_key)
    listed = _documents(archive, documents)
    graphs = saved_graphs()
    if not graphs:
        raise FoundryError("save_graph_manifest(): this process saved no graphs (call CUDAGraph.save first)")
    _check_variables(graphs)
    phases = save_phases()
    home = archive.resolve()
    in_bundle = [_bundled_here(g, home) for g in graphs]
    with phases.span("manifest_plan"):
        plans = plan_groups(graphs)
    with phases.span("manifest_deltas"):
        graphs = write_member_deltas(graphs, plans, keep_files=lambda i: not in_bundle[i])
        replace_saved(graphs)
    synced: list[Future[None]] = []
    with phases.span("manifest_bundle"):
        files = [_graph_files(g, bundled) for g, bundled in zip(graphs, in_bundle, strict=True)]
        bundle: BundleRef | None = None
        if any(in_bundle):
            # The bundle about to be written replaces the one an earlier manifest stores its graphs in: that
            # manifest goes first, so that a SAVE cut short leaves an archive without a manifest (not finished),
            # never one whose manifest names graphs the bundle no longer holds.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(archive / MANIFEST_NAME)
            parts = [(f.json, f.header, f.payload) for f, bundled in zip(files, in_bundle, strict=True) if bundled]
            # Every file but the manifest is written once the bundle is: the sync that makes them durable runs
            # beside the manifest's entries (os.sync lets the interpreter lock go for its whole call).
            size = write_bundle(archive, parts, durable=False, written=lambda: synced.append(sync_beside()))
            bundle = BundleRef(BUNDLE_NAME, size)
        else:
            synced.append(sync_beside())
    with phases.span("manifest_entries"):
        # The bytes written (to the bundle or the files), so the manifest lists exactly those.
        manifest = _manifest(archive, graphs, plans, [sha256_bytes(f.json) for f in files], in_bundle)
        manifest = replace(manifest, bundle=bundle, documents=listed)
        del files
    if key is not None:
        manifest = sign_manifest(manifest, key)
    # Everything SAVE wrote so far was written without fsync; the one sync makes it all durable before
    # the manifest, the archive's commit point, is written (durably) last.
    with phases.span("sync"):
        synced[0].result()
    with phases.span("manifest_write"):
        write_manifest(archive, manifest)
    with phases.span("manifest_tidy"):
        _remove_copies(archive, graphs, in_bundle)
    return manifest


def _bundled_here(g: SavedGraph, home: Path) -> bool:
    """Whether the graph goes into the bundle of the archive ``home`` (resolved): saved in that directory, its
    images there. A graph saved elsewhere (beside the archive, as the seed README's ``graph.json``) stays in its
    files: SAVE removes no file outside the directory it finishes, and only there does LOAD look a graph's name
    up in the manifest (docs/FORMAT.md, "Graph bundle")."""
    return g.meta.archive_dir == "." and g.json_path.resolve().parent == home


def _remove_copies(archive: Path, graphs: list[SavedGraph], in_bundle: list[bool]) -> None:
    """Once the manifest is durable, the files of the graphs it stores in its bundle are copies no reader takes
    (LOAD finds a bundled graph through the manifest, never its file): they go, so that every byte is stored
    once. So does ``region.json``, the region hint each graph's SAVE wrote for a LOAD without a manifest: the
    manifest states the region now, and LOAD takes it from there. A manifest that bundles nothing leaves an earlier
    bundle unnamed: it goes too. A crash before this leaves copies that ``foundry verify`` names (a hint it holds to
    the manifest's region, as LOAD does) and LOAD never reads."""
    for g, bundled in zip(graphs, in_bundle, strict=True):
        if bundled:
            for path in (g.json_path, container_path(g.json_path)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(archive / REGION_HINT)
    if not any(in_bundle):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(archive / BUNDLE_NAME)


def relist_documents(
    archive_dir: str | os.PathLike[str], names: Sequence[str], signing_key: KeySource | None = None
) -> Manifest:
    """Lists the documents ``names`` again in the finished archive's manifest, as they are now (each rewritten
    since ``save_graph_manifest``, or new), everything else in it unchanged, and writes it atomically: a reader
    finds the old manifest or the new one, never neither.

    A signed manifest is proven with the key in force first and signed with it again; one signed with another
    key, or signed with no key in force, raises ``SaveError`` and nothing is written, as does an unsigned
    manifest under a key (signing it now would vouch for graphs this process did not save)."""
    archive = Path(archive_dir)
    key = configured_key(signing_key)
    listed = _documents(archive, names)
    shown = archive / MANIFEST_NAME
    try:
        doc = manifest_document(archive)
        manifest = Manifest.from_json(doc, str(shown))
        if manifest.signature is not None or key is not None:
            if key is None:
                raise ArchiveSignatureError(f"{shown} is signed, and no signing key is configured to sign it again")
            check_signature(doc, key, str(shown))
    except ArchiveError as exc:
        raise SaveError(f"the documents {list(names)} cannot be listed in the archive again: {exc}") from None
    kept = {d.file: d for d in manifest.documents}
    kept.update({d.file: d for d in listed})
    manifest = replace(manifest, documents=tuple(kept.values()), signature=None)
    if key is not None:
        manifest = sign_manifest(manifest, key)
    write_manifest(archive, manifest)
    return manifest


def _documents(archive: Path, names: Sequence[str]) -> tuple[RecordRef, ...]:
    """The listing of each document ``names`` names, as it is now (written before the manifest is, and made
    durable by its sync)."""
    if isinstance(names, str):
        raise TypeError("save_graph_manifest(documents=...) takes a list of file names, not one string")
    if len(set(names)) != len(names):
        raise SaveError(f"save_graph_manifest(documents={list(names)!r}): a document is named twice")
    refs = []
    for name in names:
        try:
            refs.append(document_ref(archive, name))
        except (ArchiveError, ValueError) as exc:
            raise SaveError(
                f"save_graph_manifest cannot list the document {name!r}: {exc}. Write it into {archive} with "
                "foundry.write_archive_document first."
            ) from None
    return tuple(refs)


def _check_variables(graphs: list[SavedGraph]) -> None:
    """Every graph the manifest lists needs the same module variables of each image it shares with the
    others: the manifest lists them once per image, and LOAD holds one copy of each image. (save_graph
    checks this within one archive; graphs saved into other archives are checked here.)"""
    seen: dict[str, tuple[str, object]] = {}
    for g in graphs:
        for ref in g.meta.images:
            name, variables = seen.setdefault(ref.sha256, (g.meta.name, ref.variables))
            if variables != ref.variables:
                raise VariableConflictError(
                    f"graphs {name!r} and {g.meta.name!r} need different values of the module variables of kernel "
                    f"image {ref.sha256} (saved into different archives, or with the variables changed between "
                    "the saves); LOAD holds one copy of each image. Save them again into one archive, with the "
                    "variables written before the first capture.",
                    image=ref.sha256,
                )


def _graph_files(g: SavedGraph, bundled: bool) -> GraphFiles:
    """A saved graph's two files as bytes, exactly as ``write_graph`` wrote them (or, for a member the bundle
    holds, would have): its metadata, checked facts and record digest as SAVE has them, nothing read back. A graph
    the bundle holds, which only its manifest reaches, leaves its region's range to the manifest (format version
    5: the archive states it once)."""
    assert g.meta.record is not None
    digest = bytes.fromhex(g.meta.record.sha256)
    if g.meta.template is not None:
        assert g.delta is not None
        known = DeltaFacts(g.meta.template.record_sha256, g.scan.function_count)
        return graph_files(g.json_path, g.meta, g.delta, known, digest, bundled)
    return graph_files(g.json_path, g.meta, g.record, g.facts(), digest, bundled)


def _manifest(
    archive: Path, graphs: list[SavedGraph], plans: list[GroupPlan], json_sha256: list[str], in_bundle: list[bool]
) -> Manifest:
    """The manifest listing ``graphs`` (members already stored as deltas) in ``plans``' groups; ``json_sha256``:
    the SHA-256 of each graph's JSON; ``in_bundle``: whether each is stored in the bundle."""
    group_of = {i: gi for gi, plan in enumerate(plans) for i in (plan.template, *plan.members)}
    entries = []
    images: dict[str, ImageEntry] = {}
    kernels: dict[str, set[str]] = {}
    for i, g in enumerate(graphs):
        assert g.meta.record is not None
        plan = plans[group_of[i]]
        entries.append(
            GraphEntry(
                name=g.meta.name,
                json=os.path.relpath(g.json_path.resolve(), archive.resolve()),
                json_sha256=json_sha256[i],
                record_sha256=g.meta.record.sha256,
                nodes=g.meta.stats_dict().get("nodes", 0),
                topology=g.meta.topology,
                group=group_of[i],
                role=GraphRole.TEMPLATE if plan.template == i else GraphRole.MEMBER,
                stored=GraphStorage.BUNDLE if in_bundle[i] else GraphStorage.FILES,
            )
        )
        for ref in g.meta.images:
            images.setdefault(ref.sha256, ImageEntry.from_ref(ref))
        for fn in g.meta.functions:
            kernels.setdefault(fn.image, set()).add(fn.name)
    last = graphs[-1].meta
    return Manifest(
        foundry_version=__version__,
        created=now_iso(),
        identity=last.identity,
        region=region_spec(full_log=True) if region_state().reserved else last.region,
        images=tuple(replace(e, kernels=tuple(sorted(kernels.get(sha, ())))) for sha, e in images.items()),
        graphs=tuple(entries),
        groups=tuple(Group(graphs[p.template].meta.topology, p.template, p.members, p.varying) for p in plans),
    )
