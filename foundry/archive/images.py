"""Content-addressed files of an archive: kernel images (``<archive>/images/<sha256>.bin``) and state
memory snapshots (``<archive>/memory/<sha256>.bin``).

A file is named by the SHA-256 of its bytes, so any number of graphs and saves share it; SAVE
rewrites it only when the file there is not those bytes (a damaged copy is repaired by saving again).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from foundry.archive.atomic import read_buffer, sha256_file, write_atomic
from foundry.archive.jsonfields import At, check_format, dump_json, field, get_int, is_sha256, load_json
from foundry.archive.specs import ImageFormat, ImageRef
from foundry.errors import ArchiveCorruptError, ArchiveError

__all__ = [
    "IMAGES_DIR",
    "MEMORY_DIR",
    "image_path",
    "image_relpath",
    "memory_path",
    "open_image",
    "read_memory",
    "read_region_hint",
    "write_image",
    "write_memory",
    "write_region_hint",
]

IMAGES_DIR = "images"
MEMORY_DIR = "memory"
"""Where state memory snapshots live in an archive (docs/FORMAT.md, "State memory")."""

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
    _write_addressed(image_path(archive_dir, sha), data, size, sha, durable)
    return ImageRef(sha, size, fmt)


def _write_addressed(path: Path, data: bytes | bytearray | memoryview, size: int, sha: str, durable: bool) -> None:
    """Writes ``data`` (``size`` bytes, SHA-256 ``sha``) at ``path`` unless the file there already
    holds exactly those bytes."""
    try:
        if path.stat().st_size == size and sha256_file(path) == sha:
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, durable)


def memory_path(archive_dir: PathLike, sha256: str) -> Path:
    """The file of state memory snapshot ``sha256`` in ``archive_dir``."""
    return Path(archive_dir) / MEMORY_DIR / f"{sha256}.bin"


def write_memory(archive_dir: PathLike, data: bytes, sha256: str) -> None:
    """Stores a state memory snapshot (made durable with the archive, see atomic.py)."""
    _write_addressed(memory_path(archive_dir, sha256), data, len(data), sha256, durable=False)


def read_memory(archive_dir: PathLike, sha256: str, size: int) -> bytearray:
    """The snapshot ``sha256`` of ``size`` bytes, checked; a missing or damaged file raises
    ``ArchiveCorruptError`` naming it and the next step."""
    path = memory_path(archive_dir, sha256)
    try:
        data = read_buffer(path)
    except OSError as exc:
        missing = f"state memory {path} is missing ({exc.strerror}): copy the archive completely"
        raise ArchiveCorruptError(missing) from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise ArchiveCorruptError(f"state memory {path} is damaged (size or SHA-256 differ); save the graph again")
    return data


def open_image(archive_dir: PathLike, sha256: str, verify: bool) -> bytearray:
    """Image ``sha256``, read into a bytearray (``read_buffer``: LOAD hands its address to the driver).

    With ``verify`` the bytes are hashed and a difference raises ``ArchiveCorruptError``. A missing
    or empty image raises ``ArchiveCorruptError`` naming the hash and the directory. A malformed
    hash raises ``ValueError``.
    """
    path = image_path(archive_dir, sha256)
    try:
        data = read_buffer(path)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise ArchiveCorruptError(
            f"kernel image {sha256} is missing from {Path(archive_dir) / IMAGES_DIR} ({exc.strerror}): "
            "copy the archive completely, or save the graph again"
        ) from None
    except OSError as exc:
        raise ArchiveCorruptError(
            f"{path}: kernel image {sha256} cannot be read ({exc.strerror}): the image is damaged. "
            "Save the graph again."
        ) from None
    if not data:
        raise ArchiveCorruptError(
            f"{path}: kernel image {sha256} is empty: the image is damaged. Save the graph again."
        )
    if verify:
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise ArchiveCorruptError(
                f"{path}: content SHA-256 is {actual}, the file name says {sha256}: "
                "the image is damaged. Save the graph again."
            )
    return data


REGION_HINT = "region.json"


def write_region_hint(archive_dir: PathLike, base: int, size: int) -> None:
    """``region.json``: the region the archive's graphs were saved in, which LOAD reserves before it
    loads the images (docs/FORMAT.md). Rewritten only when it changes."""
    path = Path(archive_dir) / REGION_HINT
    text = dump_json({"format": "foundry-region", "format_version": 1, "base": base, "size": size})
    try:
        if path.read_bytes() == text:
            return
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, durable=False)


def read_region_hint(archive_dir: PathLike) -> tuple[int, int] | None:
    """(base, size) from ``region.json``, or None when it is absent or unreadable (it is only a hint)."""
    try:
        doc = load_json((Path(archive_dir) / REGION_HINT).read_bytes(), REGION_HINT)
        obj = check_format(doc, "foundry-region", (1,), REGION_HINT)
        return get_int(*field(obj, "base", At(REGION_HINT))), get_int(*field(obj, "size", At(REGION_HINT)))
    except (OSError, ArchiveError):
        return None
