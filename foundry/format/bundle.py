"""The graph bundle, ``<archive>/graph_bundle.bin`` (docs/FORMAT.md, "Graph bundle"): every graph file the
manifest lists, JSON and container, copied into one file that the manifest names with its size and SHA-256.

Why: an engine's piecewise graphs number in the thousands, and LOAD reading two files a graph, each read
and each hash letting the interpreter lock go, is what kept start-up's reading from finishing beside the
engine's own Python work. One read and one hash prove every byte of the bundle; the graph files stay (a
graph is loadable on its own, and ``foundry verify`` checks the bundle holds exactly their bytes).

Layout, little-endian: ``magic`` (8 bytes), ``version`` (u32), ``count`` (u32: the manifest's graphs, in
its order), then ``count`` entries of four u64 (JSON offset and size, container offset and size, from the
start of the file), then the bytes they point at. Pure bytes: no CUDA, no torch, no process state.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from foundry.errors import ArchiveCorruptError, ArchiveError, ArchiveForeignError, ArchiveVersionError

from .container import record_view
from .files import PathLike, inside, read_regular, sha256_bytes, write_atomic_parts
from .manifest import GraphEntry
from .values import RecordRef

__all__ = [
    "BUNDLE_NAME",
    "Bundle",
    "bundle_mismatches",
    "bundle_parts",
    "pack_bundle",
    "parse_bundle",
    "read_bundle",
    "write_bundle",
]

BUNDLE_NAME = "graph_bundle.bin"
BUNDLE_MAGIC = b"FDYBNDL\0"
BUNDLE_VERSION = 1
BUNDLE_VERSIONS: tuple[int, ...] = (BUNDLE_VERSION,)
_HEAD = struct.Struct("<8sII")
_ENTRY = struct.Struct("<QQQQ")


@dataclass(frozen=True)
class Bundle:
    """A bundle read and proven: for graph ``i`` of the manifest, views of its JSON and container bytes
    into the one buffer the file was read into (writable, as LOAD's records are)."""

    jsons: tuple[memoryview, ...]
    containers: tuple[memoryview, ...]


def bundle_parts(
    files: Sequence[tuple[bytes | bytearray | memoryview, bytes | bytearray | memoryview]],
) -> list[bytes | bytearray | memoryview]:
    """The bundle of ``files`` ((JSON bytes, container bytes) per graph, in the manifest's order) as the
    buffers to lay end to end: its head and table, then the files as given (not copied)."""
    at = _HEAD.size + _ENTRY.size * len(files)
    table = bytearray()
    for json_bytes, container in files:
        table += _ENTRY.pack(at, len(json_bytes), at + len(json_bytes), len(container))
        at += len(json_bytes) + len(container)
    parts: list[bytes | bytearray | memoryview] = [_HEAD.pack(BUNDLE_MAGIC, BUNDLE_VERSION, len(files)), table]
    for json_bytes, container in files:
        parts += [json_bytes, container]
    return parts


def pack_bundle(files: Sequence[tuple[bytes | bytearray | memoryview, bytes | bytearray | memoryview]]) -> bytes:
    """The bundle of ``files``, as one byte string."""
    return b"".join(bundle_parts(files))


def write_bundle(
    archive_dir: PathLike,
    files: Sequence[tuple[bytes | bytearray | memoryview, bytes | bytearray | memoryview]],
    durable: bool = True,
    written: Callable[[], object] | None = None,
) -> RecordRef:
    """Writes the bundle of ``files`` atomically, its parts unjoined; returns its name, size and SHA-256 for
    the manifest. ``written`` is called once the file is in place and before it is hashed (SAVE starts
    syncing the archive there, so the sync and the hash run at once)."""
    parts = bundle_parts(files)
    write_atomic_parts(Path(archive_dir) / BUNDLE_NAME, parts, durable)
    if written is not None:
        written()
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return RecordRef(BUNDLE_NAME, sum(len(p) for p in parts), digest.hexdigest())


def read_bundle(archive_dir: PathLike, ref: RecordRef, count: int) -> Bundle:
    """The bundle the manifest names (``ref``) for its ``count`` graphs, read with one read and proven by one
    hash before anything in it is looked at. ``ArchiveCorruptError`` for a missing, resized or changed file
    or a table that does not fit it, ``ArchiveForeignError``/``ArchiveVersionError`` for another file or an
    unknown version."""
    if ref.file != BUNDLE_NAME:
        raise ArchiveCorruptError(
            f"{archive_dir}: the manifest names the graph bundle {ref.file!r}, not {BUNDLE_NAME!r}"
        )
    path = inside(archive_dir, BUNDLE_NAME, "graph bundle")
    data = read_regular(path, "graph bundle", size=ref.bytes)
    actual = hashlib.sha256(data).hexdigest()
    if actual != ref.sha256:
        raise ArchiveCorruptError(
            f"{path}: its SHA-256 is {actual}, the manifest says {ref.sha256}: it was changed or damaged after SAVE "
            "wrote it. LOAD reads the graph files instead; save the archive again to repair it."
        )
    return parse_bundle(data, count, str(path))


def parse_bundle(data: bytearray, count: int, source: str) -> Bundle:
    """``read_bundle``'s checks of bytes already proven by the hash the manifest states (errors as there)."""
    if len(data) < _HEAD.size:
        raise ArchiveCorruptError(f"{source}: truncated: {len(data)} bytes, a bundle header needs {_HEAD.size}")
    magic, version, n = _HEAD.unpack_from(data)
    if magic != BUNDLE_MAGIC:
        raise ArchiveForeignError(f"{source}: not a Foundry graph bundle: bytes 0-7 are {magic!r}")
    if version not in BUNDLE_VERSIONS:
        raise ArchiveVersionError(
            f"{source}: bundle version {version}; this Foundry reads version(s) "
            f"{', '.join(map(str, BUNDLE_VERSIONS))}. Save the archive again."
        )
    if n != count:
        raise ArchiveCorruptError(f"{source}: holds {n} graphs, the manifest lists {count}")
    start = _HEAD.size + _ENTRY.size * n
    if start > len(data):
        raise ArchiveCorruptError(f"{source}: its table of {n} graphs runs past the end of the file")
    view = memoryview(data)
    jsons: list[memoryview] = []
    containers: list[memoryview] = []
    for i, (j_at, j_len, c_at, c_len) in enumerate(_ENTRY.iter_unpack(view[_HEAD.size : start])):
        for at, size, what in ((j_at, j_len, "JSON"), (c_at, c_len, "container")):
            if at < start or at + size > len(data):
                raise ArchiveCorruptError(f"{source}: graph {i}'s {what} ({size} bytes at {at}) lies outside the file")
        jsons.append(view[j_at : j_at + j_len])
        containers.append(view[c_at : c_at + c_len])
    return Bundle(tuple(jsons), tuple(containers))


def bundle_mismatches(bundle: Bundle, entries: Sequence[GraphEntry]) -> list[tuple[int, str]]:
    """(graph index, what differs) for each graph whose bundled bytes are not what the manifest lists for it
    (``entries``): its JSON's SHA-256, its container's record (header and hash). LOAD hashes each JSON too, but
    takes the records as the bundle's own hash (which the manifest states) proves them; ``foundry verify``
    proves SAVE wrote them right."""
    out: list[tuple[int, str]] = []
    for i, (entry, json_bytes, container) in enumerate(zip(entries, bundle.jsons, bundle.containers, strict=True)):
        actual = sha256_bytes(json_bytes)
        if actual != entry.json_sha256:
            out.append((i, f"its JSON has SHA-256 {actual}, the manifest lists {entry.json_sha256} for {entry.json}"))
            continue
        try:
            record = record_view(container, source=f"graph {i} of the bundle")
        except ArchiveError as exc:
            out.append((i, str(exc)))
            continue
        actual = sha256_bytes(record)
        if actual != entry.record_sha256:
            out.append(
                (i, f"its record has SHA-256 {actual}, the manifest lists {entry.record_sha256} for {entry.json}")
            )
    return out
