"""The graph bundle's layout (docs/FORMAT.md, "Graph bundle"), which its readers (bundle.py) and the bundles
stored against another rank's (bundle_delta.py) both read: the header, the table, and where each graph's JSON and
container lie. Pure bytes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

__all__ = ["BUNDLE_MAGIC", "BUNDLE_VERSION", "BUNDLE_VERSIONS", "ENTRY", "HEAD", "BundleSlot", "Part", "bundle_slots"]

BUNDLE_MAGIC = b"FDYBNDL\0"
BUNDLE_VERSION = 2
"""2: the only copy of the graphs the manifest (format version 3) stores in it, laid out end to end. Version 1
was a second copy of graph files that are there too, written beside version-2 manifests; it is not read."""
BUNDLE_VERSIONS: tuple[int, ...] = (BUNDLE_VERSION,)
HEAD = struct.Struct("<8sII")
ENTRY = struct.Struct("<QQQQ")

Part = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class BundleSlot:
    """Where one bundled graph's JSON and container lie in the bundle file (offsets from its start)."""

    json_at: int
    json_bytes: int
    container_at: int
    container_bytes: int


def bundle_slots(head: Part, count: int, size: int, source: str) -> tuple[BundleSlot, ...]:
    """The slots of a bundle of ``size`` bytes whose first bytes are ``head`` (at least its header and table,
    or the whole file), holding ``count`` graphs: its magic, version and count checked, and its table the one
    that lays the graphs end to end from the table's end to the file's. ``ArchiveForeignError`` for another
    kind of file, ``ArchiveVersionError`` for another version, ``ArchiveCorruptError`` otherwise (``source``
    names the file)."""
    if len(head) < HEAD.size:
        raise ArchiveCorruptError(f"{source}: truncated: {len(head)} bytes, a bundle header needs {HEAD.size}")
    magic, version, n = HEAD.unpack_from(head)
    if magic != BUNDLE_MAGIC:
        raise ArchiveForeignError(f"{source}: not a Foundry graph bundle: bytes 0-7 are {magic!r}")
    if version not in BUNDLE_VERSIONS:
        raise ArchiveVersionError(
            f"{source}: bundle version {version}; this Foundry reads version(s) "
            f"{', '.join(map(str, BUNDLE_VERSIONS))}. Save the archive again."
        )
    if n != count:
        raise ArchiveCorruptError(f"{source}: holds {n} graphs, the manifest stores {count} in it")
    start = HEAD.size + ENTRY.size * n
    if start > min(size, len(head)):
        raise ArchiveCorruptError(f"{source}: its table of {n} graphs runs past the end of the file")
    slots = []
    at = start
    for i, (j_at, j_len, c_at, c_len) in enumerate(ENTRY.iter_unpack(memoryview(head)[HEAD.size : start])):
        if j_at != at or c_at != j_at + j_len or c_at + c_len > size:
            raise ArchiveCorruptError(
                f"{source}: bundled graph {i}'s JSON ({j_len} bytes at {j_at}) and container ({c_len} bytes at "
                f"{c_at}) are not where the bundle's layout puts them (from byte {at}, end to end, inside the "
                f"{size}-byte file): it was changed after SAVE wrote it. Save the archive again."
            )
        slots.append(BundleSlot(j_at, j_len, c_at, c_len))
        at = c_at + c_len
    if at != size:
        raise ArchiveCorruptError(
            f"{source}: {size - at} bytes after its last graph (byte {at} on), which no graph holds: it was "
            "changed after SAVE wrote it. Save the archive again."
        )
    return tuple(slots)
