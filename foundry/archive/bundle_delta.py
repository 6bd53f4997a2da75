"""A rank's graph bundle stored against another rank's (docs/FORMAT.md, "Graph bundle stored against another
rank's"): the file ``graph_bundle.bin`` of ``rank_<r>`` holding, in place of the bundle, what rebuilds it from
``rank_<k>/graph_bundle.bin`` of the same deployment.

Why: the ranks of a tensor-parallel deployment capture the same graphs, and their records differ in a few
thousand argument words of tens of MB (docs/DESIGN.md, "Many GPUs: tensor parallel in the plugins"); stored
whole, every rank's bundle is a copy. Stored against rank 0's, a rank keeps only what differs.

How: the bundle rebuilt, T, and the base bundle, B, are laid out alike (header, table, then each graph's JSON
and container end to end). Each part of T (a graph's JSON or its container) whose part at the same place in B
has the same length is XORed with it; T's header, table and every other part are kept as they are. The result
has T's length and is zero wherever the ranks agree, which zstd stores in almost nothing. Rebuilding is the
same XOR: T's table comes back first (it was not XORed), and with it and B's table the same parts are XORed
again. The rule needs no list of its own: both tables say which parts it applies to.

What proves the result: the rebuilt bytes must have the SHA-256 the header states and the manifest's size, and
then they are a bundle like any other, read and checked graph by graph (bundle.py). The base must hold the
bytes the header names (its size and SHA-256) and be a bundle itself, not one stored against a third: a rank
folder copied without the deployment around it, or a base saved again since, is refused by name.

Layout, little-endian: magic ``FDYBNDL\\0`` (the bundle's), version u32 = 3, base rank u32, base size u64, base
SHA-256 (32 bytes), rebuilt size u64, rebuilt SHA-256 (32 bytes), then one zstd frame of the XORed bytes, its
content size stated (the rebuilt size). Pure bytes: no CUDA, no torch, no process state.
"""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path
from typing import Any

from foundry.errors import ArchiveCorruptError, ArchiveError

from .bundle_layout import BUNDLE_MAGIC, HEAD, Part, bundle_slots

__all__ = ["DELTA_VERSION", "HEAD_BYTES", "MARK_BYTES", "base_of", "is_delta", "pack_delta", "rebuild", "sibling_rank"]

DELTA_VERSION = 3
_HEAD = struct.Struct("<8sIIQ32sQ32s")
HEAD_BYTES = _HEAD.size
MARK_BYTES = 12  # the magic and the version: what tells a file stored so from a bundle laid out in full
_LEVEL = 3  # the XORed bytes are zeros but for a few words: any level stores them in almost nothing
_RANK = re.compile(r"rank_(0|[1-9][0-9]{0,8})")


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:
        raise ImportError("the 'zstandard' package is not installed (pip install zstandard)") from None
    return zstandard


def is_delta(head: Part) -> bool:
    """Whether a graph bundle file beginning with ``head`` (at least ``MARK_BYTES``) is stored against another's."""
    return (
        len(head) >= MARK_BYTES
        and bytes(head[:8]) == BUNDLE_MAGIC
        and int.from_bytes(head[8:MARK_BYTES], "little") == DELTA_VERSION
    )


def sibling_rank(directory: Path) -> int | None:
    """The rank a deployment's rank folder (``rank_<r>``) is for, or None for a folder of another name."""
    m = _RANK.fullmatch(directory.name)
    return int(m.group(1)) if m else None


def _parts(bundle: Part, source: str) -> list[tuple[int, int]]:
    """(offset, size) of each part of a bundle laid out in full (each graph's JSON, then its container), in order,
    its layout checked as its readers check it (bundle_layout.py). ``ArchiveCorruptError`` otherwise."""
    if is_delta(bundle):
        raise ArchiveCorruptError(
            f"{source}: stored against another rank's bundle itself: a bundle is stored against one laid out in "
            "full, never against another stored so"
        )
    try:
        count = HEAD.unpack_from(bundle)[2] if len(bundle) >= HEAD.size else 0
        slots = bundle_slots(bundle, count, len(bundle), source)
    except ArchiveError as exc:
        raise ArchiveCorruptError(f"{source}: not a graph bundle laid out in full ({exc})") from None
    return [part for s in slots for part in ((s.json_at, s.json_bytes), (s.container_at, s.container_bytes))]


def _xor_with_base(out: bytearray, parts: list[tuple[int, int]], base: Part, source: str) -> None:
    """XORs, in place, each of ``out``'s parts (``parts``: its table's) with the base's part at the same place in
    the base's table where the two have the same length; one part at a time, so that no more than the two bundles
    is held at once."""
    for (t_at, t_len), (b_at, b_len) in zip(parts, _parts(base, source), strict=False):
        if t_len == b_len and t_len:
            mine = int.from_bytes(out[t_at : t_at + t_len], "little")
            theirs = int.from_bytes(base[b_at : b_at + b_len], "little")
            out[t_at : t_at + t_len] = (mine ^ theirs).to_bytes(t_len, "little")


def pack_delta(bundle: Part, base: Part, base_rank: int) -> bytes:
    """The bytes that store ``bundle`` against ``base`` (rank ``base_rank``'s bundle): the file that replaces the
    bundle in its rank folder. Both must be bundles laid out in full."""
    size = len(bundle)
    xored = bytearray(bundle)
    _xor_with_base(xored, _parts(bundle, "the bundle"), base, "the base bundle")
    frame = _zstd().ZstdCompressor(level=_LEVEL, write_content_size=True).compress(xored)
    head = _HEAD.pack(
        BUNDLE_MAGIC,
        DELTA_VERSION,
        base_rank,
        len(base),
        hashlib.sha256(base).digest(),
        size,
        hashlib.sha256(bundle).digest(),
    )
    return head + frame


def base_of(data: Part, source: str) -> tuple[int, int, bytes, int, bytes]:
    """(base rank, base size, base SHA-256, rebuilt size, rebuilt SHA-256) from a stored-against file's header."""
    if len(data) < _HEAD.size:
        raise ArchiveCorruptError(f"{source}: truncated: {len(data)} bytes, its header needs {_HEAD.size}")
    _, _, rank, base_size, base_sha, size, sha = _HEAD.unpack_from(data)
    return rank, base_size, base_sha, size, sha


def rebuild(
    data: Part,
    base: Part,
    size: int,
    source: str,
    base_source: str,
) -> bytearray:
    """The bundle that ``data`` (a graph bundle file stored against ``base``) stands for, ``size`` bytes (the
    manifest's): checked against the header's base and result hashes. ``ArchiveCorruptError`` names ``source`` or
    ``base_source`` otherwise; the output is bounded by ``size`` before anything is decompressed."""
    _, base_size, base_sha, stated, sha = base_of(data, source)
    if stated != size:
        raise ArchiveCorruptError(
            f"{source}: stands for a bundle of {stated} bytes, the manifest says {size}: it is from another save. "
            "Save the archive again."
        )
    if len(base) != base_size or hashlib.sha256(base).digest() != base_sha:
        raise ArchiveCorruptError(
            f"{base_source}: is not the bundle {source} was stored against ({base_size} bytes, SHA-256 "
            f"{base_sha.hex()[:16]}...): that rank folder was saved again or changed since. Keep the deployment's "
            "rank folders together as SAVE wrote them, or save the deployment again."
        )
    zstd = _zstd()
    frame = memoryview(data)[_HEAD.size :]
    try:
        declared = zstd.frame_content_size(frame)
    except zstd.ZstdError as exc:
        raise ArchiveCorruptError(f"{source}: its zstd frame cannot be read ({exc}). Save the archive again.") from None
    if declared != size:
        raise ArchiveCorruptError(f"{source}: its zstd frame holds {declared} bytes, not {size}. Save it again.")
    try:
        xored = zstd.ZstdDecompressor().decompress(frame, max_output_size=size)
    except zstd.ZstdError as exc:
        raise ArchiveCorruptError(f"{source}: its zstd frame is damaged ({exc}). Save the archive again.") from None
    if len(xored) != size:
        raise ArchiveCorruptError(f"{source}: rebuilds {len(xored)} bytes, not {size}. Save the archive again.")
    # The table was not XORed: the rebuilt bundle's parts are laid out by it.
    out = bytearray(xored)
    del xored
    _xor_with_base(out, _parts(out, source), base, base_source)
    if hashlib.sha256(out).digest() != sha:
        raise ArchiveCorruptError(
            f"{source}: the bundle it rebuilds from {base_source} does not have the SHA-256 it states: one of the two "
            "files was changed after SAVE. Save the deployment again."
        )
    return out
