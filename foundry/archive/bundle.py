"""The graph bundle, ``<archive>/graph_bundle.bin`` (docs/FORMAT.md, "Graph bundle"): the one copy of the JSON
and container of every graph the manifest stores in it (``GraphEntry.stored``), which SAVE writes in place of
their files.

Why: an engine's piecewise graphs number in the thousands, and LOAD reading two files a graph, each read
letting the interpreter lock go, is what kept start-up's reading from finishing beside the engine's own
Python work. The bundle is read with one read (or one part at a time, ``BundleFile``). A rank's bundle may be
stored against another rank's of the same deployment (bundle_delta.py); the readers here rebuild it first, and
it is then read and checked as any other.

Layout, little-endian: ``magic`` (8 bytes), ``version`` (u32), ``count`` (u32: the bundled graphs, in the
manifest's order), then ``count`` entries of four u64 (JSON offset and size, container offset and size, from
the start of the file), then the bytes they point at, end to end in the table's order with nothing between,
before or after them. So every byte is the header's, the table's (which the sizes determine) or a graph's,
which the graph's manifest entry (its JSON's SHA-256) and its JSON (its record's) prove: the bundle needs no
hash of its own. Pure bytes: no CUDA, no torch, no process state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from foundry.errors import ArchiveCorruptError
from foundry.storage import PathLike, inside, read_range, read_regular, write_atomic_parts

from .bundle_delta import MARK_BYTES, base_of, is_delta, rebuild, sibling_rank
from .bundle_layout import BUNDLE_MAGIC, BUNDLE_VERSION, ENTRY, HEAD, BundleSlot, Part, bundle_slots

__all__ = [
    "BUNDLE_NAME",
    "Bundle",
    "BundleFile",
    "BundleSlot",
    "RebuiltBundles",
    "bundle_parts",
    "bundle_slots",
    "open_bundle",
    "pack_bundle",
    "parse_bundle",
    "read_bundle",
    "write_bundle",
]

BUNDLE_NAME = "graph_bundle.bin"
RebuiltBundles = MutableMapping[tuple[str, int, int, int, int], bytearray]
"""Bundles rebuilt from a file stored against another rank's, by that file's real path, device, inode, size and
modification time (ns): a reader that passes one to ``read_bundle`` and ``open_bundle`` rebuilds each such file
once, not once per call. The rebuilt bytes are immutable facts of the file they came from (its header states
their SHA-256, checked when they were rebuilt), and each graph read from them is checked against its manifest as
ever; a file replaced or rewritten has another key. The owner keeps it (this package keeps no process state)."""


@dataclass(frozen=True)
class BundleFile:
    """A bundle whose layout was read (its header and table alone, or with the rest), to read one graph's
    parts at a time: a reader of a few graphs of thousands need not read them all."""

    path: Path
    size: int
    slots: tuple[BundleSlot, ...]
    rebuilt: bytearray | None = None  # a bundle stored against another rank's, rebuilt: its parts are read here

    def _part(self, at: int, n: int) -> bytearray:
        if self.rebuilt is not None:
            return bytearray(memoryview(self.rebuilt)[at : at + n])
        return read_range(self.path, "graph bundle", self.size, at, n)

    def json(self, i: int) -> bytearray:
        """Bundled graph ``i``'s JSON bytes (unproven: its manifest entry states their SHA-256)."""
        s = self.slots[i]
        return self._part(s.json_at, s.json_bytes)

    def container(self, i: int) -> bytearray:
        """Bundled graph ``i``'s container bytes (unproven: its JSON states its record's SHA-256)."""
        s = self.slots[i]
        return self._part(s.container_at, s.container_bytes)


@dataclass(frozen=True)
class Bundle:
    """A whole bundle read and laid out: for bundled graph ``i``, views of its JSON and container bytes into
    the one buffer the file was read into (writable, as LOAD's records are), and its layout (to read a part
    again from the file). Not yet proven: each graph's bytes are checked against its manifest entry and JSON
    where they are used."""

    jsons: tuple[memoryview, ...]
    containers: tuple[memoryview, ...]
    layout: BundleFile


def bundle_parts(files: Sequence[Sequence[Part]]) -> list[Part]:
    """The bundle of ``files`` (per bundled graph, in the manifest's order: its JSON bytes, then its container's
    in one part or more, as a header and a record) as the buffers to lay end to end: its head and table, then
    the files as given (not copied, not joined)."""
    at = HEAD.size + ENTRY.size * len(files)
    table = bytearray()
    for json_bytes, *container in files:
        size = sum(len(p) for p in container)
        table += ENTRY.pack(at, len(json_bytes), at + len(json_bytes), size)
        at += len(json_bytes) + size
    parts: list[Part] = [HEAD.pack(BUNDLE_MAGIC, BUNDLE_VERSION, len(files)), table]
    for graph in files:
        parts += graph
    return parts


def pack_bundle(files: Sequence[Sequence[Part]]) -> bytes:
    """The bundle of ``files``, as one byte string."""
    return b"".join(bundle_parts(files))


def write_bundle(
    archive_dir: PathLike,
    files: Sequence[Sequence[Part]],
    durable: bool = True,
    written: Callable[[], object] | None = None,
) -> int:
    """Writes the bundle of ``files`` atomically, its parts unjoined; returns its size for the manifest.
    ``written`` is called once the file is in place (SAVE starts syncing the archive there, so the sync runs
    beside the manifest's entries)."""
    parts = bundle_parts(files)
    write_atomic_parts(Path(archive_dir) / BUNDLE_NAME, parts, durable)
    if written is not None:
        written()
    return sum(len(p) for p in parts)


def _bundle_path(archive_dir: PathLike, file: str) -> Path:
    if file != BUNDLE_NAME:
        raise ArchiveCorruptError(f"{archive_dir}: the manifest names the graph bundle {file!r}, not {BUNDLE_NAME!r}")
    return inside(archive_dir, BUNDLE_NAME, "graph bundle")


def _rebuilt(path: Path, size: int, cache: RebuiltBundles | None = None) -> bytearray | None:
    """The bundle at ``path`` (the manifest's, real path) rebuilt, where the file is stored against another rank's
    (bundle_delta.py), else None (the file is the bundle itself, read as such and refused there if it is not).
    ``cache``: bundles rebuilt before, taken where the file is the same one (``RebuiltBundles``)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    on_disk = st.st_size
    if on_disk == size or on_disk < MARK_BYTES:
        return None
    key = (str(path), st.st_dev, st.st_ino, on_disk, st.st_mtime_ns)
    known = cache.get(key) if cache is not None else None
    if known is not None and len(known) == size:
        return known
    if not is_delta(read_range(path, "graph bundle", on_disk, 0, MARK_BYTES)):
        return None
    out = _rebuild_file(path, size)
    if cache is not None:
        cache[key] = out
    return out


def _rebuild_file(path: Path, size: int) -> bytearray:
    """``_rebuilt``'s rebuild: the file stored against another rank's, its base read beside it."""
    data = read_regular(path, "graph bundle", limit=size)  # smaller than the bundle it stands for: SAVE made it so
    base_rank, base_size = base_of(data, str(path))[:2]
    here = sibling_rank(path.parent)
    if here is None or here == base_rank:
        raise ArchiveCorruptError(
            f"{path}: stored against rank {base_rank}'s graph bundle, but {path.parent.name!r} is not another rank's "
            "folder of a deployment (rank_<r>): copy the deployment's folder whole, with every rank_<r> in it."
        )
    base = path.parent.parent / f"rank_{base_rank}" / BUNDLE_NAME
    try:
        base_bytes = read_regular(base, "graph bundle", size=base_size)
    except ArchiveCorruptError as exc:
        if os.path.isfile(base) and os.stat(base).st_size != base_size:  # there, but not the one: as rebuild says
            base_bytes = bytearray()
        else:
            raise ArchiveCorruptError(
                f"{path}: stored against rank {base_rank}'s graph bundle {base}, which cannot be read ({exc}). Copy "
                "the deployment's folder whole, with every rank_<r> in it, or save the deployment again."
            ) from None
    return rebuild(data, base_bytes, size, str(path), str(base))


def read_bundle(archive_dir: PathLike, file: str, size: int, count: int, cache: RebuiltBundles | None = None) -> Bundle:
    """The whole bundle the manifest names (``file`` of ``size`` bytes, ``count`` graphs) with one read, laid
    out (``bundle_slots``); one stored against another rank's is rebuilt first (or taken from ``cache``).
    ``ArchiveCorruptError`` for a missing or resized file, errors as ``bundle_slots`` for its layout."""
    path = _bundle_path(archive_dir, file)
    rebuilt = _rebuilt(path, size, cache)
    data = rebuilt if rebuilt is not None else read_regular(path, "graph bundle", size=size)
    return parse_bundle(data, count, str(path), rebuilt is not None)


def parse_bundle(data: bytearray, count: int, source: str, rebuilt: bool = False) -> Bundle:
    """``read_bundle``'s layout of bytes already read (errors as there); ``rebuilt``: the bytes were rebuilt from
    a file stored against another rank's, so the layout reads its parts from them."""
    slots = bundle_slots(data, count, len(data), source)
    view = memoryview(data)
    return Bundle(
        tuple(view[s.json_at : s.json_at + s.json_bytes] for s in slots),
        tuple(view[s.container_at : s.container_at + s.container_bytes] for s in slots),
        BundleFile(Path(source), len(data), slots, data if rebuilt else None),
    )


def open_bundle(
    archive_dir: PathLike, file: str, size: int, count: int, cache: RebuiltBundles | None = None
) -> BundleFile:
    """The layout of the bundle the manifest names, read from its header and table (errors as
    ``read_bundle``); one stored against another rank's is rebuilt whole (or taken from ``cache``), and its parts
    read from that."""
    path = _bundle_path(archive_dir, file)
    rebuilt = _rebuilt(path, size, cache)
    if rebuilt is not None:
        return BundleFile(path, size, bundle_slots(rebuilt, count, size, str(path)), rebuilt)
    head = read_range(path, "graph bundle", size, 0, min(size, HEAD.size + ENTRY.size * count))
    return BundleFile(path, size, bundle_slots(head, count, size, str(path)))
