"""Where a graph's bytes are (docs/FORMAT.md, "Graph bundle"): the two files of its JSON path, or, for a graph
that the manifest in that path's directory stores in its graph bundle, the bundle, their only copy. A graph is
named by its JSON path either way, and every reader (LOAD, ``foundry verify``, ``foundry inspect``) finds its
bytes here, so that all of them read and check the same ones.

A graph JSON that the manifest in its directory lists is held to the SHA-256 listed for it before anything
decodes it (a file the manifest does not commit to is never decoded, however large); its seal's digest is then
not computed again, as the listed hash covers it. Any other graph JSON is decoded once its seal is proven. A
bundled graph with a file at its name beside the bundle is refused: which copy was meant cannot be known.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.schema import GraphEntry, GraphMeta, RegionSpec
from foundry.storage import PathLike, inside, read_regular, sha256_bytes

from .bundle import BundleFile, RebuiltBundles, open_bundle
from .graphfile import (
    MetaCache,
    container_path,
    container_payload,
    parse_meta,
    read_payload_view,
)
from .manifest import MANIFEST_NAME, Manifest, read_manifest

__all__ = [
    "GraphJson",
    "GraphStore",
    "Listing",
    "check_listed_json",
    "directory_entries",
    "listed_region",
    "manifest_if_any",
    "read_graph",
    "read_graph_json",
    "read_graph_payload",
    "read_meta",
    "read_meta_digest",
    "stray_files",
    "stray_message",
]

ManifestOf = Callable[[Path], "Manifest | None"]


def manifest_if_any(directory: Path) -> Manifest | None:
    """The manifest of ``directory`` (sealed, not signed: signatures are foundry.trust's), None where it has
    none; ``ArchiveError`` for one that cannot be read."""
    path = directory / MANIFEST_NAME
    if not os.path.lexists(path):
        return None
    return read_manifest(directory)


@dataclass(frozen=True)
class Listing:
    """A graph that the manifest in its JSON's directory lists: that directory (its archive, as named), the
    manifest, the graph's index in it, and, where the manifest stores it in its graph bundle, the bundle's
    layout and the graph's place in it."""

    archive: Path
    manifest: Manifest
    index: int
    bundle: BundleFile | None = None
    slot: int = -1
    # Files in the archive directory at a bundled graph's JSON or container name (``<stem>.json``,
    # ``<stem>.cugraph``): written after the manifest, or left by a SAVE cut short after it. Its readers refuse
    # the graph while they are there rather than take either copy silently.
    stray: tuple[str, ...] = ()

    @property
    def entry(self) -> GraphEntry:
        return self.manifest.graphs[self.index]

    @property
    def where(self) -> str:
        """Its bytes, for messages: the graph by name in its bundle, or its JSON file."""
        if self.bundle is None:
            return str(self.archive / self.entry.json)
        return f"{self.bundle.path} (graph {self.entry.name!r}, {self.entry.json})"


@dataclass
class _Directory:
    manifest: Manifest
    names: dict[str, int]  # a graph's JSON name (listed in this directory) -> its index in the manifest
    slots: dict[int, int]  # manifest index -> place in the bundle's table
    bundle: BundleFile | ArchiveError | None = None  # opened on first need; the error where it cannot be
    present: frozenset[str] | None = None  # the directory's entries, listed on first need (one call for all)


class GraphStore:
    """The manifests of the directories graphs are read from, each read once with the layout of its graph
    bundle: a reader of many graphs keeps one (within one batch of LOAD, one run of verify). ``manifest_of``
    reads a directory's manifest (None where it has none; raises for one that cannot be read): LOAD's proves
    its signature where a key is configured. ``mismatch``: what a JSON whose bytes are not the listed ones
    raises (LOAD: ``ArchiveSignatureError`` under a key). ``bundles``: bundles rebuilt before from files stored
    against another rank's (bundle.py's ``RebuiltBundles``), kept by the caller beyond this store."""

    def __init__(
        self,
        manifest_of: ManifestOf | None = None,
        mismatch: type[ArchiveError] = ArchiveCorruptError,
        bundles: RebuiltBundles | None = None,
    ):
        self._manifest_of = manifest_of if manifest_of is not None else manifest_if_any
        self._mismatch = mismatch
        self._bundles = bundles  # bundles rebuilt from files stored against another rank's, shared past this store
        self._dirs: dict[str, _Directory | None] = {}

    def listing(self, json_path: PathLike) -> Listing | None:
        """The manifest in ``json_path``'s directory's entry for it, None where that directory has no manifest
        or it does not list the graph there. For a graph it stores in its bundle, the bundle's layout is read
        here (``ArchiveCorruptError`` naming the graph where it cannot be: the bundle is its only copy)."""
        head, name = os.path.split(os.fspath(json_path))
        d = self._directory(head or ".")
        if d is None or name not in d.names:
            return None
        index = d.names[name]
        archive = Path(head or ".")
        slot = d.slots.get(index)
        if slot is None:
            return Listing(archive, d.manifest, index)
        if d.bundle is None:
            ref = d.manifest.bundle
            assert ref is not None  # a manifest that stores a graph in its bundle names one (Manifest.problem)
            try:
                d.bundle = open_bundle(archive, ref.file, ref.bytes, len(d.slots), self._bundles)
            except ArchiveError as exc:
                d.bundle = exc
        if isinstance(d.bundle, ArchiveError):
            raise type(d.bundle)(
                f"{json_path}: graph {d.manifest.graphs[index].name!r} is stored in the archive's graph bundle, which "
                f"cannot be read: {d.bundle}"
            ).as_kind(d.bundle.kind)
        if d.present is None:
            d.present = directory_entries(archive)
        return Listing(archive, d.manifest, index, d.bundle, slot, stray_files(name, d.present))

    def _directory(self, head: str) -> _Directory | None:
        if head in self._dirs:
            return self._dirs[head]
        manifest = self._manifest_of(Path(head))
        d = None
        if manifest is not None:
            names = {e.json: i for i, e in enumerate(manifest.graphs) if "/" not in e.json}
            slots = {index: slot for slot, index in enumerate(manifest.bundled())}
            d = _Directory(manifest, names, slots)
        self._dirs[head] = d
        return d

    def mismatch(self, message: str) -> ArchiveError:
        """What a JSON other than the listed bytes raises (``check_listed_json``)."""
        return self._mismatch(message)


@dataclass(frozen=True)
class GraphJson:
    """A graph JSON's bytes as read, their SHA-256, and its listing (None: no manifest in its directory lists
    it; its seal is then what proves the bytes)."""

    data: bytearray | memoryview
    sha256: str
    listing: Listing | None


def read_graph_json(json_path: PathLike, store: GraphStore) -> GraphJson:
    """The bytes of the graph JSON ``json_path`` from where they are stored, held to the SHA-256 the manifest
    in its directory lists (``store.mismatch``, naming both, before any decoding; ``ArchiveCorruptError`` for a
    JSON that cannot be read)."""
    listing = store.listing(json_path)
    if listing is not None and listing.stray:
        raise ArchiveCorruptError(stray_message(listing))
    if listing is not None and listing.bundle is not None:
        data: bytearray | memoryview = listing.bundle.json(listing.slot)
    elif listing is not None:  # in its archive's files: proven inside the archive before a byte is read through it
        data = read_regular(inside(listing.archive, listing.entry.json, "graph metadata"), "graph metadata")
    else:  # a path a program named, which may be a symbolic link: the graph's archive proves it listed, or not
        data = read_regular(json_path, "graph metadata", follow=True)
    got = GraphJson(data, sha256_bytes(data), listing)
    check_listed_json(got, store.mismatch)
    return got


def check_listed_json(got: GraphJson, mismatch: Callable[[str], ArchiveError] = ArchiveCorruptError) -> None:
    """A graph JSON's bytes (``got``), where a manifest in its directory lists it, are the ones it lists: anything
    else is refused (``mismatch``: the error, a signature's under a key) before a byte of it is decoded."""
    listing = got.listing
    if listing is not None and got.sha256 != listing.entry.json_sha256:
        error = mismatch(
            f"{listing.where}: the graph JSON's SHA-256 is {got.sha256}, the manifest "
            f"{listing.archive / MANIFEST_NAME} lists {listing.entry.json_sha256}: it was changed after the manifest "
            "was written (and is not read further). Do not load it; save the archive again."
        )
        raise error.as_kind("checksum") if isinstance(error, ArchiveCorruptError) else error


def directory_entries(directory: Path) -> frozenset[str]:
    """The names in ``directory`` (one call for all the graphs read from it; none where it cannot be listed)."""
    try:
        return frozenset(os.listdir(directory))
    except OSError:
        return frozenset()


def stray_files(json_name: str, present: frozenset[str]) -> tuple[str, ...]:
    """The files among ``present`` (a directory's entries) at a bundled graph's JSON or container name
    (``Listing.stray``)."""
    return tuple(n for n in (json_name, container_path(json_name).name) if n in present)


def stray_message(listing: Listing) -> str:
    """Why a graph with stray files (``Listing.stray``) is refused, and what to do."""
    files = " and ".join(listing.stray)
    return (
        f"{listing.where}: the archive holds {files} beside the graph bundle, which is the only copy of graph "
        f"{listing.entry.name!r} its manifest commits to: the file was saved after the manifest (save the manifest "
        "again), or left by a SAVE cut short after writing it (remove it)"
    )


def read_graph_payload(
    json_path: PathLike, meta: GraphMeta, listing: Listing | None, verify: bool = True, cpath: str | None = None
) -> memoryview:
    """The record (or a member's delta) of a graph whose metadata was read (``read_graph_json``): from its bundle
    or its container file, the container's header held to the metadata and, with ``verify``, the record to its
    SHA-256 (errors as ``read_payload_view``, a bundled one naming the graph). ``cpath``: as there."""
    if listing is not None and listing.bundle is not None:
        data = listing.bundle.container(listing.slot)
        return container_payload(data, json_path, meta, verify, f"{listing.where}'s container")
    return read_payload_view(json_path, meta, verify, cpath)


def read_meta_digest(
    json_path: PathLike, cache: MetaCache | None = None, store: GraphStore | None = None
) -> tuple[GraphMeta, str]:
    """The validated metadata of the graph JSON ``json_path``, wherever it is stored, and the SHA-256 of the very
    bytes parsed (what a signature check must compare: hashing the file again could hash other bytes). With
    ``cache``, bytes parsed before are not validated again; ``store``: the manifests read so far.

    Errors: ``ArchiveCorruptError`` (missing, bad JSON, a wrong or missing key, bytes other than listed),
    ``ArchiveForeignError`` (not a graph JSON), ``ArchiveVersionError`` (unknown format_version)."""
    got = read_graph_json(json_path, store if store is not None else GraphStore())
    return parse_meta(got.data, json_path, got.sha256, cache, got.listing is not None, listed_region(got)), got.sha256


def read_meta(json_path: PathLike, store: GraphStore | None = None) -> GraphMeta:
    """``read_meta_digest``'s metadata alone."""
    return read_meta_digest(json_path, None, store)[0]


def read_graph(json_path: PathLike, verify: bool = True, store: GraphStore | None = None) -> tuple[GraphMeta, bytes]:
    """The metadata and the graph record (a member's delta) of the graph whose JSON is ``json_path``, wherever it
    is stored. Always checked: the container's structure, and that its header carries the size and SHA-256 the
    JSON names; with ``verify`` (the default) the record is hashed too. Errors as ``read_meta``, plus
    ``ArchiveCorruptError`` for a missing, damaged or mismatched record."""
    store = store if store is not None else GraphStore()
    got = read_graph_json(json_path, store)
    meta = parse_meta(got.data, json_path, got.sha256, None, got.listing is not None, listed_region(got))
    return meta, bytes(read_graph_payload(json_path, meta, got.listing, verify))


def listed_region(got: GraphJson) -> RegionSpec | None:
    """The region of the manifest that lists the graph ``got`` in its own directory, whose range a graph JSON of
    format version 5 takes (None: no manifest there lists it)."""
    return got.listing.manifest.region if got.listing is not None else None
