"""Reading and writing one graph: ``<stem>.json`` (metadata) and ``<stem>.cugraph`` (record).

Write order is ``.cugraph`` then ``.json``, each atomically. The JSON holds the record's size and
SHA-256, so a reader that starts from the JSON detects a ``.cugraph`` from another save.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path, PurePath
from typing import Protocol

from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.records import (
    Delta,
    GraphRecord,
    container_header,
    parse_delta,
    parse_record,
    read_container_header,
    record_view,
    topology_key,
)
from foundry.records.layout import CONTAINER_RECORD_OFFSET
from foundry.schema import GRAPH_FORMAT, GraphMeta, RecordRef, RegionSpec
from foundry.schema.jsondocs import load_sealed, seal
from foundry.schema.jsonfields import Parts
from foundry.storage import PathLike, inside, inside_name, read_regular, write_atomic, write_atomic_parts

__all__ = [
    "DeltaFacts",
    "GraphFiles",
    "MetaCache",
    "RecordFacts",
    "container_path",
    "container_payload",
    "graph_files",
    "parse_meta",
    "read_payload",
    "read_payload_view",
    "record_path",
    "resolve_archive_dir",
    "template_path",
    "write_graph",
]


def container_path(json_path: PathLike) -> Path:
    """Where ``write_graph`` puts the record of ``json_path``: same directory, suffix ``.cugraph``."""
    return Path(json_path).with_suffix(".cugraph")


@dataclasses.dataclass(frozen=True)
class RecordFacts:
    """What a caller has proven of a graph record already, every byte of it checked (SAVE's native scan):
    the counts its header states and its topology key. ``write_graph`` takes them instead of parsing the
    record again."""

    function_count: int
    event_count: int
    topology: str

    @classmethod
    def of(cls, record: GraphRecord) -> RecordFacts:
        return cls(record.function_count, record.event_count, topology_key(record))


@dataclasses.dataclass(frozen=True)
class DeltaFacts:
    """What a caller has proven of a delta already (SAVE compares the native writer's bytes with those it
    joins itself): its template and the member's function count."""

    template_sha256: str
    function_count: int

    @classmethod
    def of(cls, delta: Delta) -> DeltaFacts:
        return cls(delta.template_sha256, delta.function_count)


@dataclasses.dataclass(frozen=True)
class GraphFiles:
    """A graph's two files as bytes, not written: its metadata as it is to be written, its JSON, and its
    container (``header`` then ``payload``, the record or delta, kept apart: never joined)."""

    meta: GraphMeta
    json: bytes
    header: bytes
    payload: bytes | bytearray | memoryview


def graph_files(
    json_path: PathLike,
    meta: GraphMeta,
    record: bytes | bytearray | memoryview,
    known: RecordFacts | DeltaFacts | None = None,
    record_sha256: bytes | None = None,
    listed: bool = False,
) -> GraphFiles:
    """What ``write_graph`` writes, checked as it checks it (``ValueError``), without writing it: SAVE puts the
    graphs of an archive directory in its bundle only (docs/FORMAT.md, "Graph bundle"). ``listed``: the JSON of a
    graph the manifest in its directory lists, which takes its region's range from it (format version 5)."""
    json_path = Path(json_path)
    cpath = container_path(json_path)
    if cpath == json_path:
        raise ValueError(f"{json_path}: a graph's JSON file must not end in .cugraph")
    if meta.template is not None:
        _check_delta(meta, record, known if isinstance(known, DeltaFacts) else None)
    else:
        topology = _check_record(meta, record, known if isinstance(known, RecordFacts) else None)
        if not meta.topology:
            meta = dataclasses.replace(meta, topology=topology)
    problem = meta.problem()
    if problem is not None:
        raise ValueError(f"graph {meta.name!r}: {problem}")
    digest = hashlib.sha256(record).digest() if record_sha256 is None else record_sha256
    header = container_header(record, digest)
    final = dataclasses.replace(meta, record=RecordRef(cpath.name, len(record), digest.hex()))
    return GraphFiles(final, seal(final.to_json(listed)), header, record)


def write_graph(
    json_path: PathLike,
    meta: GraphMeta,
    record: bytes | bytearray | memoryview,
    known: RecordFacts | DeltaFacts | None = None,
    durable: bool = True,
    record_sha256: bytes | None = None,
) -> GraphMeta:
    """Write ``<stem>.cugraph`` (the container of ``record``) and then ``<stem>.json`` atomically.

    ``record`` is a graph record, or a delta when ``meta.template`` is set (a template member).
    ``known`` is what the caller proved of it already (its facts: the record or delta is then not
    parsed again). ``durable=False`` skips the fsyncs (see foundry.storage.files; SAVE makes a whole
    archive durable at once). ``record_sha256`` is the record's digest where the caller has it (else it
    is computed here); the container is written as its header and then ``record``, never joined.

    ``meta.record`` is ignored and replaced, and an empty ``meta.topology`` is filled with the record's
    topology key (a given one is checked); the returned metadata is the one written. Before
    anything is written, ``record``'s facts are checked against ``meta`` (function count, event
    count, topology key, image references); any disagreement raises ``ValueError`` and leaves the
    disk untouched. The parent directory must exist.
    """
    files = graph_files(json_path, meta, record, known, record_sha256)
    write_atomic_parts(container_path(json_path), (files.header, files.payload), durable)
    write_atomic(json_path, files.json, durable)
    return files.meta


def _check_delta(meta: GraphMeta, payload: bytes | bytearray | memoryview, delta: DeltaFacts | None) -> None:
    assert meta.template is not None
    if delta is None:
        try:
            delta = DeltaFacts.of(parse_delta(payload))
        except ArchiveError as exc:
            raise ValueError(f"graph {meta.name!r}: the delta is not valid: {exc}") from None
    if delta.function_count != len(meta.functions):
        raise ValueError(
            f"graph {meta.name!r}: the delta names {delta.function_count} functions, the metadata lists "
            f"{len(meta.functions)}"
        )
    if delta.template_sha256 != meta.template.record_sha256:
        raise ValueError(f"graph {meta.name!r}: the delta's template is not the one the metadata names")


def _check_record(meta: GraphMeta, record: bytes | bytearray | memoryview, facts: RecordFacts | None) -> str:
    """Checks a record against its metadata; returns the record's topology key."""
    if facts is None:
        try:
            facts = RecordFacts.of(parse_record(record))
        except ArchiveError as exc:
            raise ValueError(f"graph {meta.name!r}: the record is not valid: {exc}") from None
    if facts.function_count != len(meta.functions):
        raise ValueError(
            f"graph {meta.name!r}: the record names {facts.function_count} functions, "
            f"the metadata lists {len(meta.functions)}"
        )
    if facts.event_count != meta.events:
        raise ValueError(
            f"graph {meta.name!r}: the record uses {facts.event_count} events, the metadata says {meta.events}"
        )
    if meta.topology and meta.topology != facts.topology:
        raise ValueError(
            f"graph {meta.name!r}: metadata topology {meta.topology!r} is not the record's topology key "
            f"{facts.topology}"
        )
    return facts.topology


class MetaCache(Parts, Protocol):
    """Parsed metadata by the SHA-256 of the JSON bytes it was parsed from (LOAD keeps one per
    process: the same bytes always give the same immutable ``GraphMeta``), and the parts graphs repeat."""

    def get(self, digest: str) -> GraphMeta | None: ...

    def put(self, digest: str, meta: GraphMeta) -> None: ...


def parse_meta(
    data: bytes | bytearray | memoryview,
    json_path: PathLike,
    digest: str,
    cache: MetaCache | None = None,
    proven: bool = False,
    archive: RegionSpec | None = None,
) -> GraphMeta:
    """The metadata a graph JSON's bytes hold (``digest``: their SHA-256), validated; with ``cache``, bytes
    parsed before are not validated again. ``proven``: a hash that covers the bytes was checked already (a
    graph bundle's), so their seal's digest is not computed again. ``archive``: the region of the manifest that
    lists the graph in its own directory (``GraphMeta.from_json``). Errors as ``read_meta``."""
    # The same bytes under another manifest name another region (format version 5): kept apart.
    key = digest if archive is None else f"{digest}@{archive.range_key()}"
    meta = cache.get(key) if cache is not None else None
    if meta is None:
        source = str(json_path)
        meta = GraphMeta.from_json(load_sealed(data, source, GRAPH_FORMAT, cache, proven), source, cache, archive)
        if cache is not None:
            cache.put(key, meta)
    return meta


def read_payload(json_path: PathLike, meta: GraphMeta, verify: bool = True) -> bytes:
    """The record (or, for a template member, the delta) of a graph whose metadata was read already:
    the second half of read_graph, for readers that check all metadata first (background LOAD)."""
    return bytes(read_payload_view(json_path, meta, verify))


def record_path(json_path: PathLike, meta: GraphMeta) -> str:
    """The resolved path of the graph's record container, proven to lie beside its JSON (as text: LOAD keeps
    one for each of thousands of graphs, and only opens it)."""
    assert meta.record is not None  # from_json always sets it
    return inside_name(_directory(json_path), meta.record.file, f"graph record of {json_path}")


def read_payload_view(
    json_path: PathLike, meta: GraphMeta, verify: bool = True, cpath: str | None = None
) -> memoryview:
    """``read_payload`` as a writable view into the one buffer the file was read into: no copy
    (LOAD reads tens of MB of records on several threads, and every fresh page is a page fault
    those threads contend for). ``cpath`` is ``record_path(json_path, meta)`` where the caller has it
    already (LOAD resolves it with the graph's other paths, on its calling thread). Errors as
    ``read_payload``."""
    json_path = _as_path(json_path)
    assert meta.record is not None  # from_json always sets it
    if cpath is None:
        cpath = record_path(json_path, meta)
    data = read_regular(cpath, f"graph record of {json_path}", size=CONTAINER_RECORD_OFFSET + meta.record.bytes)
    return container_payload(data, json_path, meta, verify, cpath)


def container_payload(
    data: bytearray | memoryview, json_path: PathLike, meta: GraphMeta, verify: bool = True, source: str | None = None
) -> memoryview:
    """The record (or delta) in container bytes ``data`` as a view, once the container's header is proven
    to state the size and SHA-256 that the graph's metadata names; with ``verify``, the record is hashed
    too (a graph bundle's bytes are proven by the bundle's hash: LOAD passes False there). ``source``
    names the bytes in errors (default: the graph's record file)."""
    assert meta.record is not None  # from_json always sets it
    where = source if source is not None else str(container_path(json_path))
    header = read_container_header(data, source=where)
    if header.sha256 != meta.record.sha256 or header.record_size != meta.record.bytes:
        raise ArchiveCorruptError(
            f"{where} holds a {header.record_size}-byte record with SHA-256 {header.sha256}, but "
            f"{json_path} expects {meta.record.bytes} bytes with SHA-256 {meta.record.sha256}: the two "
            "come from different saves. Save the graph again."
        )
    return record_view(data, verify=verify, source=where, header=header)


def template_path(json_path: PathLike, meta: GraphMeta) -> Path:
    """The resolved JSON path of the template a member's metadata names (``meta.template`` set)."""
    assert meta.template is not None
    return inside(_directory(json_path), meta.template.json, "template")


def resolve_archive_dir(json_path: PathLike, meta: GraphMeta) -> Path:
    """The directory holding the graph's images: ``meta.archive_dir`` taken relative to the JSON's
    directory, resolved, and proven to lie in it (``ArchiveCorruptError`` otherwise)."""
    return inside(_directory(json_path), meta.archive_dir, "archive directory")


def _as_path(path: PathLike) -> Path:
    return path if isinstance(path, Path) else Path(path)  # a Path built again would parse its text again


def _directory(json_path: PathLike) -> str:
    """``str(Path(json_path).parent)``; from a Path's text (already normalized) without building another."""
    if not isinstance(json_path, PurePath):
        return str(Path(json_path).parent)
    head, slash, _ = str(json_path).rpartition("/")
    return head if head.strip("/") else head + slash or "."  # the root ("/", "//") or the current directory
