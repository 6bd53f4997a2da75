"""The entries of a fatbin (magic 0xBA55ED50), decompressed.

Layout (little-endian): a 16-byte header ``u32 magic, u16 version, u16 header_size, u64 fat_size``, then
entries back to back, each ``u16 kind (1 PTX, 2 ELF), u16 version, u32 header_size, u64 padded payload
size`` ... ``u32 compressed size`` at 16, ``u32 sm arch`` at 28, ``u64 flags`` at 40, ``u64 uncompressed
size`` at 56, followed by the payload padded to 8 bytes. A compressed entry's flags say how:

* ``0x2000``: an LZ4 *block* (no frame; nvcc's ``-compress-mode=speed``, and every nvcc before 12.8),
  ``compressed size`` bytes that expand to exactly ``uncompressed size`` bytes;
* ``0x8000``: a Zstandard *frame* (nvcc 12.8 and later by default, magic ``28 B5 2F FD``).

nvcc compresses PTX entries by default and ELF entries with ``-Xfatbin -compress-all`` (which the
PyTorch wheels are built with). Decompression uses the ``lz4`` and ``zstandard`` packages; an entry
that cannot be decompressed (package missing, damaged data, sizes that disagree) is returned with the
reason instead of its payload, never guessed at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from foundry.records.layout import (
    FATBIN_COMPRESSED_LZ4,
    FATBIN_COMPRESSED_ZSTD,
    FATBIN_ENTRY,
    FATBIN_HEADER,
    FATBIN_MAGIC,
    FatbinHeader,
    FatbinKind,
    offsets,
)
from foundry.records.layout import FatbinEntry as EntryHeader

__all__ = [
    "FATBIN_COMPRESSED_LZ4",
    "FATBIN_COMPRESSED_ZSTD",
    "FATBIN_MAGIC",
    "FatbinEntry",
    "FatbinKind",
    "fatbin_entries",
    "fatbin_header",
]

MAX_UNCOMPRESSED = 1 << 31
"""Bound on one entry's uncompressed size: a larger claim is damage, not a kernel image."""


@dataclass(frozen=True, slots=True)
class FatbinEntry:
    """One entry: its kind, target architecture (``sm_arch``, e.g. 90) and payload, decompressed; or
    ``payload`` None and ``problem`` saying why it cannot be read."""

    kind: int
    sm_arch: int
    payload: bytes | None
    problem: str | None = None


def fatbin_header(data: bytes | bytearray | memoryview) -> FatbinHeader | None:
    """The header of a fatbin, or None when ``data`` does not start with one (too short, other magic)."""
    if len(data) < FATBIN_HEADER.size:
        return None
    header = FatbinHeader.unpack_from(data)
    return header if header.magic == FATBIN_MAGIC else None


_ENTRY_AT = offsets("fatbin_entry")


def fatbin_entries(
    data: bytes | memoryview, keep: Callable[[int, int], bool] | None = None
) -> tuple[list[FatbinEntry], str | None]:
    """Every entry of the fatbin ``data`` (exactly ``header_size + fat_size`` bytes), and what made the
    walk stop early (None when it reached the end): an entry header that does not fit. With ``keep``,
    only the entries for which ``keep(kind, sm_arch)`` holds, the others neither copied nor decompressed."""
    header = FatbinHeader.unpack_from(data)
    at, end = header.header_size, header.header_size + header.fat_size
    out: list[FatbinEntry] = []
    while at + _ENTRY_AT["compressed_size"] <= end:  # the fields every entry header holds
        # An entry header holds the fields past the first 16 only when it is that long: read short
        # ones as if the rest were zero.
        head = bytes(data[at : min(at + FATBIN_ENTRY.size, end)]).ljust(FATBIN_ENTRY.size, b"\0")
        entry = EntryHeader.unpack_from(head)
        size = entry.header_size
        if size < _ENTRY_AT["compressed_size"] or at + size + entry.payload_size > end:
            return out, f"entry {len(out)} at byte {at} does not fit the fatbin"
        if size < FATBIN_ENTRY.size:
            entry = EntryHeader.unpack_from(head[:size].ljust(FATBIN_ENTRY.size, b"\0"))
        if keep is None or keep(entry.kind, entry.sm_arch):
            out.append(_entry(len(out), entry, data[at + size : at + size + entry.payload_size]))
        at += size + ((entry.payload_size + 7) & ~7)
    return out, None if at >= end else f"{end - at} bytes after the last entry"


def _entry(index: int, header: EntryHeader, raw: bytes | memoryview) -> FatbinEntry:
    kind, arch, flags = header.kind, header.sm_arch, header.flags
    method = flags & (FATBIN_COMPRESSED_LZ4 | FATBIN_COMPRESSED_ZSTD)
    if not method:
        return FatbinEntry(kind, arch, bytes(raw))  # a copy: the image's own bytes may go away
    what = f"fatbin entry {index} (sm_{arch}, {'LZ4' if method == FATBIN_COMPRESSED_LZ4 else 'Zstandard'})"
    if method == FATBIN_COMPRESSED_LZ4 | FATBIN_COMPRESSED_ZSTD or header.header_size < FATBIN_ENTRY.size:
        return FatbinEntry(kind, arch, None, f"{what}: unknown compression flags {flags:#x}")
    compressed, expanded = header.compressed_size, header.uncompressed_size
    if compressed > len(raw) or not 0 < expanded <= MAX_UNCOMPRESSED:
        return FatbinEntry(kind, arch, None, f"{what}: sizes {compressed} -> {expanded} do not fit the entry")
    try:
        if method == FATBIN_COMPRESSED_LZ4:
            payload = _lz4().block.decompress(raw[:compressed], uncompressed_size=expanded)
        else:
            payload = _zstd().ZstdDecompressor().decompress(raw[:compressed], max_output_size=expanded)
    except ImportError as exc:
        return FatbinEntry(kind, arch, None, f"{what}: {exc}")
    except Exception as exc:  # each library raises its own error type for damaged data
        return FatbinEntry(kind, arch, None, f"{what}: cannot be decompressed ({exc})")
    if len(payload) != expanded:
        return FatbinEntry(kind, arch, None, f"{what}: expands to {len(payload)} bytes, its header says {expanded}")
    return FatbinEntry(kind, arch, payload)


def _lz4() -> Any:
    try:
        import lz4.block
    except ImportError:
        raise ImportError("the 'lz4' package is not installed (pip install lz4)") from None
    return lz4


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:
        raise ImportError("the 'zstandard' package is not installed (pip install zstandard)") from None
    return zstandard
