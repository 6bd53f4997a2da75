"""LOAD's first step, CPU work only: a graph's bytes read and checked into a ``GraphSource``.

A graph is named by its JSON path, and its bytes are where its archive stores them (foundry.archive.stored):
its two files, or the archive's graph bundle, their only copy, for a graph the manifest in that path's
directory stores there. The gate's rules for a graph (foundry.gate.graph) run here, as each part is read and
before anything touches the GPU: the JSON is held to the SHA-256 that manifest lists before it is decoded, the
metadata is validated, the graph is proven listed in its archive's manifest (signed, under a key), a template
member's template is found and proven to be the one its delta was made against. Records are read (and
checksummed) lazily, so that background LOAD reads them on its reader threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from foundry._state import ProcessState
from foundry.archive import (
    GraphStore,
    Listing,
    container_payload,
    read_graph_json,
    read_graph_payload,
    read_meta_digest,
    record_path,
    resolve_archive_dir,
    template_path,
)
from foundry.gate import (
    authenticate_graph,
    check_template,
    check_template_path,
    graph_meta,
    graph_store,
    manifests_read_once,
)
from foundry.records import node_count
from foundry.schema import GraphMeta
from foundry.storage import real_name
from foundry.trust import SigningKey, configured_key

__all__ = ["GraphSource", "read_source", "read_sources", "source_images"]

T = TypeVar("T")

_META_CACHE_MAX = 4096


@dataclass
class GraphSource:
    """A graph read and checked: its metadata, and its record (or, for a template member, its delta and
    its template's source). A source read with ``lazy`` holds only its metadata until
    ``read_payload()``, so that background LOAD can read records off the calling thread."""

    json_path: Path
    meta: GraphMeta
    _payload: memoryview | None  # a writable view of the buffer the bytes were read into (no copies), proven
    archive_dir: Path
    template: GraphSource | None = None
    json_sha256: str = ""  # of the JSON bytes ``meta`` was parsed from
    # The record container's path, proven to lie beside the JSON when the source was read (with the graph's
    # other paths, each resolved once per batch), so that reader threads need not resolve it again.
    record_file: str | None = None
    # Where the manifest in the JSON's directory lists the graph: for one it stores in its graph bundle, where
    # the record is read from (the bundle is its only copy).
    listing: Listing | None = None
    # A bundled graph's container as start-up read it with the whole bundle: its record is hashed against the
    # metadata where LOAD first needs it (on LOAD's reader threads), not at start-up.
    _container: memoryview | None = None

    def read_payload(self) -> memoryview:
        if self._payload is None:
            container, self._container = self._container, None
            if container is not None:
                where = f"{self.listing.where}'s container" if self.listing is not None else None
                self._payload = container_payload(container, self.json_path, self.meta, True, where)
            else:
                self._payload = read_graph_payload(self.json_path, self.meta, self.listing, cpath=self.record_file)
        return self._payload

    def release_payload(self) -> None:
        """Drops the record from memory; ``payload`` reads it again (checked) when next needed."""
        self._payload = None
        self._container = None

    @property
    def payload(self) -> memoryview:
        return self.read_payload()

    @property
    def node_count(self) -> int:
        return node_count(self.payload)


@dataclass
class _Sources:
    """Full-record sources by (resolved JSON path, record SHA-256): a template is read once per process
    whether it is loaded itself or reached from its members, and a template saved again (another
    record) is read afresh. And validated metadata by the SHA-256 of the JSON bytes: validating dozens
    of graph JSONs is most of what LOAD does on the calling thread before its loader starts, so
    load_cuda_modules_and_libraries reads them ahead, at process start (bounded: a process that reads
    graphs forever keeps the latest)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    full: dict[tuple[str, str], GraphSource] = field(default_factory=dict)  # by (``real_name``, record SHA-256)
    meta: dict[str, GraphMeta] = field(default_factory=dict)
    # Sources read and checked at process start, by (absolute path as named, signing key id): LOAD takes
    # each once (``read_sources``); ``prepared_bytes`` is what their records hold.
    prepared: dict[tuple[str, str], tuple[GraphSource, int]] = field(default_factory=dict)  # with its bytes
    prepared_bytes: int = 0
    parts: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # format.Parts, by kind

    def get(self, digest: str) -> GraphMeta | None:
        with self.lock:
            return self.meta.get(digest)

    def part(self, kind: str, raw: str, parse: Callable[[str], T]) -> T:
        """format.Parts: the last ``raw`` text of each kind with what it gave (an archive's graphs repeat them)."""
        return self._kept(kind, raw, parse, equal=True)

    def same(self, kind: str, raw: Any, parse: Callable[[Any], T]) -> T:
        """format.Parts.same: ``part`` for the very ``raw`` kept, not an equal one."""
        return self._kept(kind, raw, parse, equal=False)

    def _kept(self, kind: str, raw: Any, parse: Callable[[Any], T], equal: bool) -> T:
        last = self.parts.get(kind)
        # Equal only as texts: two strings are equal when they hold the same characters, unlike JSON values.
        if last is not None and (last[0] is raw or (equal and type(raw) is str and last[0] == raw)):
            return cast(T, last[1])
        parsed = parse(raw)
        self.parts[kind] = (raw, parsed)  # one pair per kind: a reference swap, safe between threads
        return parsed

    def put(self, digest: str, meta: GraphMeta) -> None:
        with self.lock:
            if len(self.meta) >= _META_CACHE_MAX:
                self.meta.pop(next(iter(self.meta)))
            self.meta[digest] = meta


_STATE = ProcessState("load.sources", _Sources)


def read_meta_cached(json_path: str | os.PathLike[str]) -> tuple[GraphMeta, str]:
    """``read_meta_digest`` through this process's cache of validated metadata."""
    return read_meta_digest(json_path, _STATE.get())


def read_source(json_path: str | os.PathLike[str], lazy: bool = False) -> GraphSource:
    """Reads and checks a graph (and its template, once per process), wherever its archive stores it. CPU
    work only.

    Each graph read (its template included) must be listed, with the SHA-256 of the JSON bytes parsed,
    in its archive's manifest when the archive has one (``ArchiveCorruptError`` otherwise), and in a
    manifest signed with the key when a signing key is configured (``ArchiveSignatureError`` otherwise):
    this runs before anything touches the GPU. A template that is itself stored as changes to a template,
    or a graph stored as changes to itself, raises ``ArchiveCorruptError`` (the gate's rules for a graph:
    foundry.gate.graph).
    """
    key = configured_key()
    return _read_source(Path(json_path), key, lazy, None, graph_store(key))


def read_sources(
    paths: Iterable[str | os.PathLike[str]], lazy: bool = False, counts: dict[str, int] | None = None
) -> list[GraphSource]:
    """``read_source`` for each path, as one batch: each archive's manifest (and graph bundle's layout) is read
    and checked once for all of them (foundry.gate.manifests_read_once), not once per graph and again per
    template.

    A graph start-up read ahead (load/readahead.py), under the same signing key (or none), is taken as
    it was read then: those bytes were checked then, against the manifest checked then, exactly as here,
    so a file changed since is not read again (LOAD uses what was proven, never what was not).

    ``counts`` (where given) gets ``read_ahead``, the graphs taken as start-up read them, and ``read_here``,
    those read by this call."""
    key = configured_key()
    key_id = key.key_id if key is not None else ""
    state = _STATE.get()
    out: list[GraphSource] = []
    proven: set[int] = set()
    taken = 0
    with manifests_read_once():
        store = graph_store(key)
        for p in paths:
            with state.lock:
                src, size = state.prepared.pop((_as_named(p), key_id), (None, 0))
                state.prepared_bytes -= size
            out.append(src if src is not None else _read_source(Path(p), key, lazy, proven, store))
            taken += src is not None
    if counts is not None:
        counts.update(read_ahead=taken, read_here=len(out) - taken)
    return out


def _as_named(path: str | os.PathLike[str]) -> str:
    """The path as absolute, with no ``..`` folded away (through a symlink, ``a/link/..`` is not ``a``):
    two spellings share a prepared source only where they name the same file."""
    name = os.fspath(path)
    if name.startswith("/") and "//" not in name and "/./" not in name and not name.endswith(("/", "/.")):
        return name  # absolute, and already spelled as a Path spells it
    return str(Path(os.getcwd(), name))


def _full_source(json_path: Path, meta: GraphMeta, digest: str, lazy: bool, listing: Listing | None) -> GraphSource:
    assert meta.record is not None
    state = _STATE.get()
    key = (real_name(json_path), meta.record.sha256)
    with state.lock:
        src = state.full.get(key)
        if src is None:
            bundled = listing is not None and listing.bundle is not None
            src = GraphSource(json_path, meta, None, resolve_archive_dir(json_path, meta), None, digest,
                              None if bundled else record_path(json_path, meta), listing)  # fmt: skip
            state.full[key] = src
    if not lazy:
        src.read_payload()
    return src


def _read_source(
    json_path: Path,
    key: SigningKey | None,
    lazy: bool,
    proven: set[int] | None,
    store: GraphStore,
) -> GraphSource:
    """``read_source``'s work: the gate's rules for a graph (foundry.gate.graph), applied as each part is read.
    ``proven``: the templates (by ``id``) authenticated earlier in this batch, under the same key and manifests,
    which its other members need not authenticate again; ``store``: the batch's manifests and bundles."""
    state = _STATE.get()
    got = read_graph_json(json_path, store)  # held to its directory's manifest before it is decoded
    meta = graph_meta(json_path, got, state)
    digest, listing = got.sha256, got.listing
    authenticate_graph(json_path, meta, key, digest)
    if meta.template is None:
        return _full_source(json_path, meta, digest, lazy, listing)
    tpath = template_path(json_path, meta)
    check_template_path(json_path, tpath)
    with state.lock:
        template = state.full.get((str(tpath), meta.template.record_sha256))
    if template is None:
        template = _read_template(json_path, meta, tpath, key, store)
    elif proven is None or id(template) not in proven:
        # read earlier, perhaps before a key was configured or the manifest was written
        authenticate_graph(tpath, template.meta, key, template.json_sha256)
    check_template(json_path, meta, tpath, template.meta)
    if proven is not None:
        proven.add(id(template))
    if not lazy:
        template.read_payload()
    bundled = listing is not None and listing.bundle is not None
    cpath = None if bundled else record_path(json_path, meta)
    payload = None if lazy else read_graph_payload(json_path, meta, listing, cpath=cpath)
    return GraphSource(json_path, meta, payload, resolve_archive_dir(json_path, meta), template, digest, cpath, listing)


def _read_template(
    json_path: Path, meta: GraphMeta, tpath: Path, key: SigningKey | None, store: GraphStore
) -> GraphSource:
    """The template ``tpath`` of the member ``json_path``, read and checked as any graph is, its record left for
    ``read_payload``; one that is itself a member is refused (``check_template``) before its own template is
    looked for: members are built from templates holding their own record only, so no chain is ever followed."""
    state = _STATE.get()
    got = read_graph_json(tpath, store)
    tmeta = graph_meta(tpath, got, state)
    authenticate_graph(tpath, tmeta, key, got.sha256)
    check_template(json_path, meta, tpath, tmeta)
    return _full_source(tpath, tmeta, got.sha256, True, got.listing)


def source_images(src: GraphSource) -> dict[str, tuple[Path, int]]:
    """Image SHA-256 -> (directory holding it, size in bytes) for a graph and its template; each
    image is looked up in the archive of the graph that names it."""
    images: dict[str, tuple[Path, int]] = {}
    for s in (src, src.template):
        if s is not None:
            for ref in s.meta.images:
                images.setdefault(ref.sha256, (s.archive_dir, ref.bytes))
    return images
