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

import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FATBIN_COMPRESSED_LZ4",
    "FATBIN_COMPRESSED_ZSTD",
    "FATBIN_KIND_ELF",
    "FATBIN_KIND_PTX",
    "FATBIN_MAGIC",
    "FatbinEntry",
    "fatbin_entries",
]

FATBIN_MAGIC = 0xBA55ED50
FATBIN_KIND_PTX = 1
FATBIN_KIND_ELF = 2
FATBIN_COMPRESSED_LZ4 = 0x2000
FATBIN_COMPRESSED_ZSTD = 0x8000
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


def fatbin_entries(data: bytes | memoryview) -> tuple[list[FatbinEntry], str | None]:
    """Every entry of the fatbin ``data`` (exactly ``header_size + fat_size`` bytes), and what made the
    walk stop early (None when it reached the end): an entry header that does not fit."""
    header, fat = struct.unpack_from("<HQ", data, 6)
    at, end = header, header + fat
    out: list[FatbinEntry] = []
    while at + 16 <= end:
        kind, _version, entry_header, size = struct.unpack_from("<HHIQ", data, at)
        if entry_header < 16 or at + entry_header + size > end:
            return out, f"entry {len(out)} at byte {at} does not fit the fatbin"
        fields = bytes(data[at : at + entry_header])
        arch = struct.unpack_from("<I", fields, 28)[0] if entry_header >= 32 else 0
        flags = struct.unpack_from("<Q", fields, 40)[0] if entry_header >= 48 else 0
        raw = data[at + entry_header : at + entry_header + size]
        out.append(_entry(len(out), kind, arch, flags, fields, raw))
        at += entry_header + ((size + 7) & ~7)
    return out, None if at >= end else f"{end - at} bytes after the last entry"


def _entry(index: int, kind: int, arch: int, flags: int, fields: bytes, raw: bytes | memoryview) -> FatbinEntry:
    method = flags & (FATBIN_COMPRESSED_LZ4 | FATBIN_COMPRESSED_ZSTD)
    if not method:
        return FatbinEntry(kind, arch, bytes(raw))
    what = f"fatbin entry {index} (sm_{arch}, {'LZ4' if method == FATBIN_COMPRESSED_LZ4 else 'Zstandard'})"
    if method == FATBIN_COMPRESSED_LZ4 | FATBIN_COMPRESSED_ZSTD or len(fields) < 64:
        return FatbinEntry(kind, arch, None, f"{what}: unknown compression flags {flags:#x}")
    compressed = struct.unpack_from("<I", fields, 16)[0]
    expanded = struct.unpack_from("<Q", fields, 56)[0]
    if compressed > len(raw) or not 0 < expanded <= MAX_UNCOMPRESSED:
        return FatbinEntry(kind, arch, None, f"{what}: sizes {compressed} -> {expanded} do not fit the entry")
    try:
        if method == FATBIN_COMPRESSED_LZ4:
            payload = _lz4().block.decompress(bytes(raw[:compressed]), uncompressed_size=expanded)
        else:
            payload = _zstd().ZstdDecompressor().decompress(bytes(raw[:compressed]), max_output_size=expanded)
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
