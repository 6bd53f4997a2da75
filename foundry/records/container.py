"""The ``.cugraph`` container (docs/FORMAT.md, "Graph container"): a 64-byte header that carries
the size and SHA-256 of the graph record that follows it.

The container does not look inside the record; ``parse_record`` does that.
"""

from __future__ import annotations

import hashlib
import mmap
from dataclasses import dataclass

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

from . import layout as L

__all__ = [
    "ContainerHeader",
    "container_header",
    "pack_container",
    "read_container_header",
    "record_view",
    "unpack_container",
]

Buffer = bytes | bytearray | memoryview | mmap.mmap


@dataclass(frozen=True, slots=True)
class ContainerHeader:
    """The validated header of a container: where the record is, its size and its SHA-256 (hex)."""

    version: int
    record_offset: int
    record_size: int
    sha256: str


def container_header(record: bytes | bytearray | memoryview, sha256: bytes | None = None) -> bytes:
    """The 64-byte header of ``record``'s container (version 1, flags 0, offset 64); ``sha256`` is the
    record's digest where the caller hashed it already (SAVE hashes a record on another thread while it
    gathers the rest), else it is computed here. The container is this header, then the record."""
    digest = hashlib.sha256(record).digest() if sha256 is None else sha256
    if len(digest) != 32:
        raise ValueError(f"a record's SHA-256 is 32 bytes, not {len(digest)}")
    return L.ContainerFields(
        magic=L.CONTAINER_MAGIC,
        version=L.CONTAINER_VERSION,
        flags=0,
        record_offset=L.CONTAINER_RECORD_OFFSET,
        record_size=len(record),
        record_sha256=digest,
    ).pack()


def pack_container(record: bytes | bytearray | memoryview) -> bytes:
    """The container bytes for ``record``: its header, then the record."""
    return container_header(record) + bytes(record)


def read_container_header(data: Buffer, *, source: str = "graph container") -> ContainerHeader:
    """Validate the header of container ``data`` without hashing the record.

    Raises ``ArchiveForeignError`` (magic is not ``b"FDYGRAPH"``), ``ArchiveVersionError`` (unknown
    container version) or ``ArchiveCorruptError`` (short header, non-zero flags, record offset not
    64, or a record size that does not end exactly at the end of ``data``). ``source`` names the
    file in messages.
    """
    n = len(data)
    magic = bytes(data[:8])
    if magic != L.CONTAINER_MAGIC:
        if n < 8 and L.CONTAINER_MAGIC.startswith(magic):
            raise ArchiveCorruptError(f"{source}: truncated: {n} bytes, a container header needs 64")
        raise ArchiveForeignError(
            f"{source}: not a Foundry graph container: bytes 0-7 are {magic!r}, expected {L.CONTAINER_MAGIC!r}"
        )
    if n < L.CONTAINER_SIZE:
        raise ArchiveCorruptError(f"{source}: truncated: {n} bytes, a container header needs {L.CONTAINER_SIZE}")
    h = L.ContainerFields.unpack_from(data)
    version, flags, offset, size, digest = h.version, h.flags, h.record_offset, h.record_size, h.record_sha256
    if version not in L.CONTAINER_VERSIONS:
        raise ArchiveVersionError(
            f"{source}: byte 8, container version: found version {version}; this Foundry reads "
            f"container version(s) {', '.join(map(str, L.CONTAINER_VERSIONS))}. Load it with the "
            "Foundry release that wrote it, or save the graph again."
        )
    if flags:
        raise ArchiveCorruptError(f"{source}: byte 12, flags: {flags:#x}, must be 0")
    if offset != L.CONTAINER_RECORD_OFFSET:
        raise ArchiveCorruptError(f"{source}: byte 16, record offset: {offset}, must be 64")
    if offset + size != n:
        raise ArchiveCorruptError(
            f"{source}: byte 24, record size: {size} bytes at offset 64 need a {offset + size}-byte "
            f"file, but it is {n} bytes (truncated or appended to)"
        )
    return ContainerHeader(version, offset, size, digest.hex())


def unpack_container(data: Buffer, *, verify: bool = True, source: str = "graph container") -> bytes:
    """The graph record inside container ``data``, after ``read_container_header``'s checks and,
    when ``verify`` (the default), a SHA-256 check of the record (``ArchiveCorruptError`` if it
    differs from the header's)."""
    return bytes(record_view(data, verify=verify, source=source))


def record_view(
    data: Buffer, *, verify: bool = True, source: str = "graph container", header: ContainerHeader | None = None
) -> memoryview:
    """``unpack_container`` without the copy: a view of the record inside ``data`` (writable when
    ``data`` is, which lets LOAD hand it to native code as is). ``header``: ``read_container_header(data)``
    where the caller read it already."""
    if header is None:
        header = read_container_header(data, source=source)
    record = memoryview(data)[header.record_offset :]
    if verify:
        actual = hashlib.sha256(record).hexdigest()
        if actual != header.sha256:
            raise ArchiveCorruptError(
                f"{source}: the graph record's SHA-256 is {actual}, but the container header (byte 32) "
                f"says {header.sha256}: the file is damaged. Save the graph again."
            )
    return record
