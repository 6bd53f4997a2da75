"""Files of an archive: crash-safe writes, whole-file reads, SHA-256, and the content-addressed store.

``write_atomic`` guarantees that if it raises (or the process dies) the file still holds its old
bytes, or does not exist if it did not before: the bytes go to a temporary file in the same
directory, which is renamed over the target. With ``durable`` (the default) the file is ``fsync``ed
before and the directory after the rename, so the new bytes survive a power loss once it returns.

SAVE writes graph files without ``durable`` and makes them durable all at once before the manifest,
its commit point: after a power loss a non-durable file can only be empty or short, which the
checksums that the manifest and each graph's JSON carry reveal, so LOAD refuses rather than misreads.

Content-addressed files (kernel images ``images/<sha256>.bin``, state memory ``memory/<sha256>.bin``)
are named by the SHA-256 of their bytes, so any number of graphs and saves share one; SAVE rewrites
such a file only when the file there is not those bytes (a damaged copy is repaired by saving again).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import secrets
from pathlib import Path

from foundry.errors import ArchiveCorruptError, ArchiveError

from .jsonfields import At, check_format, dump_json, field, get_int, load_json

__all__ = [
    "IMAGES_DIR",
    "MEMORY_DIR",
    "REGION_HINT",
    "TEMP_SUFFIX",
    "memory_path",
    "read_buffer",
    "read_memory",
    "read_region_hint",
    "sha256_bytes",
    "sha256_file",
    "write_addressed",
    "write_atomic",
    "write_memory",
    "write_region_hint",
]

TEMP_SUFFIX = ".foundry-tmp"
"""Suffix of the temporary files ``write_atomic`` creates (and removes) next to its target."""
IMAGES_DIR = "images"
"""Where kernel images live in an archive (docs/FORMAT.md, "Kernel images")."""
MEMORY_DIR = "memory"
"""Where state memory snapshots live in an archive (docs/FORMAT.md, "State memory")."""
REGION_HINT = "region.json"
"""The region LOAD reserves before it loads images (docs/FORMAT.md, "Region hint")."""

_CHUNK = 1 << 20

PathLike = str | os.PathLike[str]


def write_atomic(path: PathLike, data: bytes | bytearray | memoryview, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically, and durably unless told not to (module docstring).

    The new file gets the usual permissions (0666 less the umask). The parent directory must exist.
    Errors are the ``OSError`` of the failing call; the temporary file is removed before it
    propagates, so an existing ``path`` is never damaged.
    """
    target = Path(path)
    directory = target.parent
    fd, tmp = _create_temp(directory, target.name)
    try:
        with open(fd, "wb", closefd=True) as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(directory)


def _create_temp(directory: Path, name: str) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # platforms without directory handles: the rename is as durable as it gets
    try:
        os.fsync(dfd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(dfd)


def read_buffer(path: PathLike) -> bytearray:
    """The whole file, in one read into a buffer of its size. Writable, because ctypes can only take
    the address of a writable buffer, and not a mapping: page faults on mappings serialize on the
    process's memory-map lock when several threads read (LOAD's readers ran at ~35 MB/s each).
    Raises OSError as ``open`` does, and when the file changed size while it was read."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = bytearray(size)
        got = f.readinto(data)
    if got != size:
        raise OSError(errno.EIO, f"changed size while read ({got} of {size} bytes)", str(path))
    return data


def sha256_bytes(data: bytes | bytearray | memoryview | mmap.mmap) -> str:
    """Lower-case hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: PathLike) -> str:
    """Lower-case hex SHA-256 of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def write_addressed(path: Path, data: bytes | bytearray | memoryview, size: int, sha: str, durable: bool) -> None:
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
    """Stores a state memory snapshot (made durable with the archive, see the module docstring)."""
    write_addressed(memory_path(archive_dir, sha256), data, len(data), sha256, durable=False)


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
