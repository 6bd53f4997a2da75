"""Kernel images of an archive (``<archive>/images/<sha256>.bin``): storing and reading them, and
what an image is, read from its bytes (its format and the kernels it defines).

The scan readers are strict and never raise: anything they cannot read with certainty (a compressed
fatbin entry, an ELF file without a symbol table) is reported as "not known", never guessed.
``foundry verify`` uses them to check that every kernel a graph launches is in the image its function
table names.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from foundry.errors import ArchiveCorruptError

from .files import IMAGES_DIR, inside, read_regular, write_addressed
from .jsonfields import is_sha256
from .values import ImageFormat, ImageRef

__all__ = [
    "KernelNames",
    "detect_format",
    "image_path",
    "image_relpath",
    "kernel_names",
    "open_image",
    "write_image",
]

PathLike = str | os.PathLike[str]


def image_relpath(sha256: str) -> str:
    """``images/<sha256>.bin``, the path the manifest records (``ValueError`` for a bad hash)."""
    if not is_sha256(sha256):
        raise ValueError(f"{sha256!r:.80} is not a lower-case hex SHA-256")
    return f"{IMAGES_DIR}/{sha256}.bin"


def image_path(archive_dir: PathLike, sha256: str) -> Path:
    """The file of image ``sha256`` in ``archive_dir`` (``ValueError`` for a malformed hash)."""
    return Path(archive_dir) / image_relpath(sha256)


def write_image(
    archive_dir: PathLike,
    data: bytes | bytearray | memoryview,
    fmt: ImageFormat | str,
    sha256: str | None = None,
    durable: bool = True,
) -> ImageRef:
    """Store ``data`` under its SHA-256 and describe it. ``sha256`` skips hashing when the caller
    has just computed it; ``durable`` as for write_atomic.

    If the file already exists with the right size it is left alone (content addressing: same name,
    same bytes); otherwise it is written atomically, creating ``images/`` if needed. ``fmt`` must be
    an ``ImageFormat`` or its value, and ``data`` must not be empty (``ValueError`` otherwise).
    """
    fmt = ImageFormat(fmt)
    size = memoryview(data).nbytes
    if size == 0:
        raise ValueError("a kernel image cannot be empty")
    sha = sha256 or hashlib.sha256(data).hexdigest()
    write_addressed(image_path(archive_dir, sha), data, size, sha, durable)
    return ImageRef(sha, size, fmt)


def open_image(archive_dir: PathLike, sha256: str, verify: bool, size: int | None = None) -> bytearray:
    """Image ``sha256`` of ``archive_dir``, read into a bytearray (``read_regular``: only a regular file
    inside the archive, ``size`` bytes exactly when the archive states it; LOAD hands the buffer's
    address to the driver).

    With ``verify`` the bytes are hashed and a difference raises ``ArchiveCorruptError``; so does a
    missing, empty, linked-out or special file. A malformed hash raises ``ValueError``.
    """
    what = f"kernel image {sha256}"
    data = read_regular(inside(archive_dir, image_relpath(sha256), what), what, size=size)
    if not data:
        raise ArchiveCorruptError(f"{image_path(archive_dir, sha256)}: {what} is empty: save the graph again")
    if verify:
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise ArchiveCorruptError(
                f"{image_path(archive_dir, sha256)}: content SHA-256 is {actual}, the file name says {sha256}: "
                "the image is damaged. Save the graph again."
            )
    return data


# ------------------------------------------------------------------ what an image holds
FATBIN_MAGIC = 0xBA55ED50
_FATBIN_KIND_PTX = 1
_FATBIN_KIND_ELF = 2
_FATBIN_COMPRESSED = 0x2000
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$]*)")


@dataclass(frozen=True, slots=True)
class KernelNames:
    """Kernel names an image defines. ``complete`` is False when part of the image could not be read
    (then a name missing from ``names`` may still be in it)."""

    names: frozenset[str]
    complete: bool


def detect_format(data: bytes) -> ImageFormat | None:
    """The format of an image file as the driver would take it: a fatbin (magic 0xBA55ED50, and exactly
    as long as its header says), an ELF file, or NUL-terminated PTX text; None for anything else."""
    if len(data) >= 16 and struct.unpack_from("<I", data)[0] == FATBIN_MAGIC:
        header, fat = struct.unpack_from("<HQ", data, 6)
        return ImageFormat.FATBIN if header >= 16 and header + fat == len(data) else None
    if data[:4] == b"\x7fELF":
        return ImageFormat.ELF
    if data.endswith(b"\0") and len(data) > 1:
        head = data[: min(256, len(data) - 1)]
        if all(c in (9, 10, 11, 12, 13) or 0x20 <= c <= 0x7E for c in head):
            return ImageFormat.PTX
    return None


def kernel_names(data: bytes, fmt: ImageFormat) -> KernelNames:
    """The kernels image ``data`` of format ``fmt`` defines: ELF symbol names, PTX ``.entry`` names,
    and those of every fatbin entry that is not compressed."""
    if fmt == ImageFormat.ELF:
        names = _elf_symbols(data)
        return KernelNames(frozenset(), False) if names is None else KernelNames(names, True)
    if fmt == ImageFormat.PTX:
        return KernelNames(_ptx_entries(data), True)
    return _fatbin_names(data)


def _ptx_entries(data: bytes) -> frozenset[str]:
    return frozenset(m.group(1).decode("ascii", "replace") for m in _PTX_ENTRY.finditer(data))


def _elf_symbols(data: bytes) -> frozenset[str] | None:
    """Every symbol name of the ELF64 little-endian file's symbol tables, or None when it has none
    or its section headers do not fit the file."""
    n = len(data)
    if n < 64 or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shnum == 0 or shentsize < 64 or shoff + shnum * shentsize > n:
        return None
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    found = False
    for _name, sh_type, _f, _a, off, size, link, _info, _align, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        if link >= shnum or off + size > n:
            return None
        str_off, str_size = sections[link][4], sections[link][5]
        if str_off + str_size > n:
            return None
        strtab = data[str_off : str_off + str_size]
        step = entsize or 24
        if step < 24:
            return None
        found = True
        for at in range(off, off + size - 23, step):
            name_at = struct.unpack_from("<I", data, at)[0]
            end = strtab.find(b"\0", name_at)
            if name_at and end > name_at:
                names.add(strtab[name_at:end].decode("utf-8", "replace"))
    return frozenset(names) if found else None


def _fatbin_names(data: bytes) -> KernelNames:
    if detect_format(data) != ImageFormat.FATBIN:
        return KernelNames(frozenset(), False)
    header, fat = struct.unpack_from("<HQ", data, 6)
    at, end = header, header + fat
    names: set[str] = set()
    complete = True
    while at + 16 <= end:
        kind, _unknown, entry_header, size = struct.unpack_from("<HHIQ", data, at)
        if entry_header < 16 or at + entry_header + size > end:
            return KernelNames(frozenset(names), False)
        flags = struct.unpack_from("<Q", data, at + 40)[0] if entry_header >= 48 else 0
        payload = data[at + entry_header : at + entry_header + size]
        if flags & _FATBIN_COMPRESSED or kind not in (_FATBIN_KIND_PTX, _FATBIN_KIND_ELF):
            complete = False
        elif kind == _FATBIN_KIND_PTX:
            names |= _ptx_entries(payload)
        else:
            found = _elf_symbols(payload)
            if found is None:
                complete = False
            else:
                names |= found
        at += entry_header + ((size + 7) & ~7)
    return KernelNames(frozenset(names), complete and at >= end)
