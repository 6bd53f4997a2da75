"""A graph's rules, as LOAD reads it (load/source.py, load/readahead.py) and ``foundry verify`` reads it
(gate/files.py): its JSON is the bytes the manifest in its directory lists (archive/stored.py), its metadata
valid, the archive it names for its images the one that lists it; the manifest of that archive lists it, at its
path, as read, and says of it what it says of itself (name, record, topology, machine, region, images and their
module variables), signed under a key; a member's template is neither itself nor a member, and holds the record
its delta was made against."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from foundry._state import ProcessState
from foundry.archive import (
    MANIFEST_NAME,
    GraphJson,
    GraphStore,
    Listing,
    Manifest,
    MetaCache,
    listed_region,
    parse_meta,
    read_graph_json,
    resolve_archive_dir,
)
from foundry.errors import ArchiveCorruptError, ArchiveSignatureError
from foundry.schema import GraphEntry, GraphMeta, VariableRef
from foundry.schema.jsonfields import relative_path_problem
from foundry.storage import PathLike, inside_name, real_name, sha256_file
from foundry.trust import SigningKey

from .manifests import archive_manifest, no_manifest, proven_manifest

__all__ = [
    "authenticate_graph",
    "check_agrees",
    "check_listed_here",
    "check_template",
    "check_template_path",
    "graph_meta",
    "graph_store",
    "manifest_disagreement",
    "read_graph_meta",
    "rebuilt_bundles",
]


class _Rebuilt(OrderedDict[tuple[str, int, int, int, int], bytearray]):
    """The bundles this process rebuilt from files stored against another rank's (archive's ``RebuiltBundles``),
    the last ``KEPT`` of them: a rank's LOAD reads one, and each store, each lone graph read and start-up's reading
    would otherwise rebuild it again (tens of MB, a tenth of a second or more each)."""

    KEPT = 2

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def __setitem__(self, key: tuple[str, int, int, int, int], value: bytearray) -> None:
        with self.lock:
            super().__setitem__(key, value)
            while len(self) > self.KEPT:
                self.popitem(last=False)


_REBUILT = ProcessState("gate.rebuilt_bundles", _Rebuilt)


def rebuilt_bundles() -> _Rebuilt:
    """This process's bundles rebuilt from files stored against another rank's, for ``read_bundle`` and every
    ``GraphStore`` LOAD makes: each such file is rebuilt once a process."""
    return _REBUILT.get()


def graph_store(key: SigningKey | None) -> GraphStore:
    """Where graphs' bytes are, as LOAD reads them under ``key``: each directory's manifest proven (signed with
    the key, where one is in force: once per ``manifests_read_once`` batch), and a JSON other than the bytes it
    lists refused as a signature's problem under a key."""
    return GraphStore(
        lambda directory: archive_manifest(directory, key),
        ArchiveSignatureError if key is not None else ArchiveCorruptError,
        rebuilt_bundles(),
    )


def read_graph_meta(
    json_path: PathLike, store: GraphStore, cache: MetaCache | None = None
) -> tuple[GraphMeta, GraphJson]:
    """The metadata of the graph JSON ``json_path`` read as LOAD reads it (its two steps, which load/source.py
    takes one by one), with its bytes as read: from where its archive stores them, held to the SHA-256 the
    manifest in its directory lists before they are decoded (archive.read_graph_json), then ``graph_meta``."""
    got = read_graph_json(json_path, store)
    return graph_meta(json_path, got, cache), got


def graph_meta(json_path: PathLike, got: GraphJson, cache: MetaCache | None = None) -> GraphMeta:
    """The metadata of a graph JSON's bytes ``got`` (proven to be the listed ones where a manifest lists them),
    validated (archive.parse_meta; ``cache``: bytes parsed before are not validated again), and looking for its
    images in the archive that lists it (``check_listed_here``)."""
    meta = parse_meta(got.data, json_path, got.sha256, cache, got.listing is not None, listed_region(got))
    check_listed_here(json_path, meta, got.listing)
    return meta


def check_listed_here(json_path: PathLike, meta: GraphMeta, listing: Listing | None) -> None:
    """A graph the manifest in its own directory lists (``listing``) looks for its images in that directory, the
    archive whose manifest vouches for it: SAVE lists a graph in the manifest of the archive it names, and a
    bundled graph can be read only through that manifest."""
    if listing is None:
        return
    images_at = resolve_archive_dir(json_path, meta)
    if str(images_at) != real_name(listing.archive):
        raise ArchiveCorruptError(
            f"{json_path}: it is listed by the manifest of {listing.archive}"
            f"{' and stored in its graph bundle' if listing.bundle is not None else ''}, but looks for its images in "
            f"{images_at}: the metadata was edited or comes from another save. Save the archive again."
        ).as_kind("mismatch")


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
    check_agrees(json_path, archive, verified.manifest, entry, meta)


def check_agrees(json_path: PathLike, archive: Path, manifest: Manifest, entry: GraphEntry, meta: GraphMeta) -> None:
    """The graph ``json_path`` says of itself what ``manifest`` (of ``archive``) and its ``entry`` say of it."""
    problem = manifest_disagreement(manifest, entry, meta)
    if problem:
        raise ArchiveCorruptError(
            f"{json_path} and the manifest {archive / MANIFEST_NAME} disagree: {problem}. The two come from different "
            "saves; save the archive again."
        ).as_kind("mismatch")


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


def check_template_path(json_path: PathLike, tpath: Path) -> None:
    """A member (``json_path``, resolved) is not stored as changes to itself: it could never be rebuilt."""
    if str(tpath) == real_name(json_path):
        raise ArchiveCorruptError(
            f"{json_path} is stored as changes to itself, so it can never be rebuilt: the archive is damaged. Save the "
            "graphs (and the manifest) again."
        )


def check_template(json_path: PathLike, meta: GraphMeta, tpath: Path, template: GraphMeta) -> None:
    """The template ``template`` (read from ``tpath``) of the member ``json_path`` (``meta``) holds its own record,
    the one the member's delta was made against: LOAD builds a member from its template's record only."""
    assert meta.template is not None and template.record is not None
    if template.template is not None:
        raise ArchiveCorruptError(
            f"{json_path} is stored as changes to the template {tpath}, which is itself stored as changes to another "
            "graph: LOAD builds members only from templates that hold their own record. Save the graphs (and the "
            "manifest) again."
        )
    if template.record.sha256 != meta.template.record_sha256:
        raise ArchiveCorruptError(
            f"{json_path} is stored as changes to the template {tpath}, whose record is now {template.record.sha256}, "
            f"but its delta was made against {meta.template.record_sha256}: the template was saved again after this "
            "member, or the two come from different saves. Save the graphs (and the manifest) again."
        ).as_kind("mismatch")
