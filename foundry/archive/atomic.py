"""Crash-safe file writes and SHA-256 helpers.

``write_atomic`` guarantees that if it raises (or the process dies) the file still holds its old
bytes, or does not exist if it did not before: the bytes go to a temporary file in the same
directory, which is renamed over the target. With ``durable`` (the default) the file is ``fsync``ed
before and the directory after the rename, so the new bytes survive a power loss once it returns.

SAVE writes graph files without ``durable`` and makes them durable all at once before the manifest,
its commit point: after a power loss a non-durable file can only be empty or short, which the
checksums that the manifest and each graph's JSON carry reveal, so LOAD refuses rather than misreads.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import secrets
from pathlib import Path

__all__ = ["TEMP_SUFFIX", "sha256_bytes", "sha256_file", "write_atomic"]

TEMP_SUFFIX = ".foundry-tmp"
"""Suffix of the temporary files ``write_atomic`` creates (and removes) next to its target."""

_CHUNK = 1 << 20


def write_atomic(path: str | os.PathLike[str], data: bytes | bytearray | memoryview, durable: bool = True) -> None:
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


def read_buffer(path: str | os.PathLike[str]) -> bytearray:
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


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Lower-case hex SHA-256 of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
