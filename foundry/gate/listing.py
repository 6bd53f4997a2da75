"""A graph and its archive's manifest: the manifest of the archive a graph names (``archive_dir``) lists it, at
its path, as the bytes read, and says of it what the graph says of itself (name, record, topology, machine,
region, images and their module variables). Under a key that manifest is the signed one."""

from __future__ import annotations

from pathlib import Path

from foundry.errors import ArchiveCorruptError, ArchiveSignatureError
from foundry.format import (
    MANIFEST_NAME,
    GraphEntry,
    GraphMeta,
    Manifest,
    PathLike,
    VariableRef,
    inside_name,
    real_name,
    relative_path_problem,
    resolve_archive_dir,
    sha256_file,
)
from foundry.trust import SigningKey

from .manifests import no_manifest, proven_manifest

__all__ = ["authenticate_graph", "manifest_disagreement"]


def authenticate_graph(
    json_path: PathLike, meta: GraphMeta, key: SigningKey | None, json_sha256: str | None = None
) -> None:
    """Proves that the graph JSON ``json_path`` (whose parsed metadata is ``meta``) is the one its
    archive's manifest lists: at this path (a file in the archive, not a link out of it, where the manifest
    names it inside the archive), with the SHA-256 of the bytes ``meta`` was parsed from
    (``json_sha256``; without it, of the file as it is now), and agreeing with what the manifest says
    of it (name, record, topology, machine identity, region, images).

    With ``key``, the manifest must exist and be signed with it (``ArchiveSignatureError`` otherwise,
    and for a graph unlisted or changed after signing). Without, an archive that has no manifest yet
    (graphs saved, manifest not written) passes; one that has a manifest must list the graph as it is
    (``ArchiveCorruptError`` otherwise). Raises as ``authenticate_manifest`` for an unreadable manifest.
    """
    json_path = json_path if isinstance(json_path, Path) else Path(json_path)
    archive = resolve_archive_dir(json_path, meta)
    verified = proven_manifest(archive, key)
    if verified is None:
        if key is not None:
            raise no_manifest(archive, key)
        return
    error = ArchiveSignatureError if key is not None else ArchiveCorruptError
    entry = verified.listing.get(real_name(json_path))
    if entry is None:
        what = "signed manifest" if key is not None else "manifest"
        raise error(
            f"{json_path} is not listed in the {what} {archive / MANIFEST_NAME}: it was saved after the manifest was "
            "written, or does not belong to that archive. Save the manifest again (save_graph_manifest), or load only "
            "graphs the archive lists."
        )
    if relative_path_problem(entry.json) is None:  # listed inside the archive: no link may lead out of it
        inside_name(archive, entry.json, "graph metadata")
    actual = json_sha256 if json_sha256 is not None else sha256_file(json_path)
    if actual != entry.json_sha256:
        raise error(
            f"{json_path} was changed after the manifest was written: its SHA-256 is {actual}, the manifest "
            f"{archive / MANIFEST_NAME} says {entry.json_sha256}. Do not load it; save the archive again."
        )
    problem = manifest_disagreement(verified.manifest, entry, meta)
    if problem:
        raise ArchiveCorruptError(
            f"{json_path} and the manifest {archive / MANIFEST_NAME} disagree: {problem}. The two come from different "
            "saves; save the archive again."
        )


def manifest_disagreement(manifest: Manifest, entry: GraphEntry, meta: GraphMeta) -> str | None:
    """What a graph's metadata and its manifest (and manifest entry) state differently, or None."""
    assert meta.record is not None
    if (entry.name, entry.record_sha256, entry.topology) != (meta.name, meta.record.sha256, meta.topology):
        return "the graph's name, record SHA-256 or topology key"
    if manifest.identity != meta.identity:
        return "the machine the graph was saved on (identity)"
    ours, theirs = manifest.region, meta.region
    if (ours.base, ours.size, ours.granularity) != (theirs.base, theirs.size, theirs.granularity):
        return f"the region (base {ours.base:#x} size {ours.size} in the manifest, {theirs.base:#x} {theirs.size} here)"
    images = {e.sha256: e for e in manifest.images}
    for ref in meta.images:
        listed = images.get(ref.sha256)
        if listed is None or (listed.bytes, listed.format) != (ref.bytes, ref.format):
            return f"kernel image {ref.sha256} (not listed with the same size and format)"
        if None not in (listed.variables, ref.variables) and listed.variables != ref.variables:
            here, there = _listing(ref.variables), _listing(listed.variables)
            return (
                f"the module variables of kernel image {ref.sha256}, which load_cuda_modules_and_libraries writes as "
                f"the manifest lists them (here {here}, in the manifest {there})"
            )
    return None


def _listing(variables: tuple[VariableRef, ...] | None) -> str:
    return "[" + ", ".join(f"{v.name} ({v.bytes} bytes, {v.sha256[:12]})" for v in variables or ()) + "]"
