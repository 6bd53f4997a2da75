"""Bounded, non-blocking reads of whole files and of parts of them: every file of an archive is read here, and
every file a user names in its place (a signing key, an identity to compare with).

Only regular files are read: opened without blocking (a FIFO with no writer would hang an open that waits),
then checked with fstat before a byte is read (a FIFO, a device or a directory is refused by its type: it would
never end). Never more bytes than the size the archive states, or a fixed bound for files whose size nothing
states. Messages name paths, never the bytes of a file that is not the archive's; a file the user names is
worded with what to give instead (``next_step``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable

from foundry.errors import ArchiveCorruptError

__all__ = ["MAX_JSON_BYTES", "PathLike", "file_kind", "read_range", "read_regular", "sha256_file"]

MAX_JSON_BYTES = 1 << 30
"""Bound on reading a graph JSON or a manifest, whose size no other file states."""

_CHUNK = 1 << 20

PathLike = str | os.PathLike[str]


def read_regular(
    path: PathLike,
    what: str,
    *,
    size: int | None = None,
    limit: int = MAX_JSON_BYTES,
    follow: bool = False,
    next_step: str | None = None,
) -> bytearray:
    """The whole regular file ``path`` in one buffer of its size, read without blocking and bounded:
    ``size`` bytes exactly when given, else at most ``limit``. The last component is not followed
    unless ``follow`` (paths ``inside`` resolved have none; a path the user named may be a link).
    Writable, because ctypes can only take the address of a writable buffer; not a mapping, because
    page faults on mappings serialize on the process's memory-map lock when several threads read.

    ``ArchiveCorruptError`` names the path and ``what`` for a missing file, a link, a directory, a
    FIFO or device, a size other than ``size`` or beyond ``limit``, a file that changed while read, and one
    this process has no memory left to hold. Its words are for a file of an archive (copy or save the
    archive again); ``next_step`` words them for a file the user named instead (a key, an identity, a
    document): "the WHAT PATH cannot be read (why): NEXT_STEP", which callers raise again as their own error.
    """

    def refused(archive_words: str, why: str) -> ArchiveCorruptError:
        if next_step is None:
            return ArchiveCorruptError(archive_words)
        return ArchiveCorruptError(f"the {what} {path} cannot be read ({why}): {next_step}")

    fd, st = _open_regular(path, what, follow, refused)
    try:
        if size is not None and st.st_size != size:
            raise refused(
                f"{path}: the {what} is {st.st_size} bytes, the archive says {size}: it is truncated, appended to or "
                "from another save. Save it again.",
                f"it is {st.st_size} bytes, not {size}",
            ).as_kind("checksum")
        if st.st_size > limit:
            raise refused(
                f"{path}: the {what} is {st.st_size} bytes, more than the {limit} a reader takes",
                f"it is {st.st_size} bytes, more than the {limit} a reader takes",
            )
        data = _read_at(fd, path, what, 0, st.st_size, refused)
        if os.pread(fd, 1, st.st_size):  # grown since fstat
            raise _changed(refused, path, what)
    except OSError as exc:
        raise refused(f"{path}: cannot read the {what}: {exc.strerror}", str(exc.strerror)) from None
    finally:
        os.close(fd)
    return data


def read_range(path: PathLike, what: str, size: int, at: int, n: int) -> bytearray:
    """Bytes ``at .. at + n`` of the regular file ``path``, which must be ``size`` bytes (and hold that range):
    ``read_regular``'s checks and errors, for a part of a file (one graph of a graph bundle)."""
    if at < 0 or n < 0 or at + n > size:
        raise ArchiveCorruptError(f"{path}: {n} bytes at {at} lie outside the {size}-byte {what}")

    def refused(archive_words: str, why: str) -> ArchiveCorruptError:
        return ArchiveCorruptError(archive_words)

    fd, st = _open_regular(path, what, False, refused)
    try:
        if st.st_size != size:
            raise refused(
                f"{path}: the {what} is {st.st_size} bytes, the archive says {size}: it is truncated, appended to or "
                "from another save. Save it again.",
                "",
            ).as_kind("checksum")
        return _read_at(fd, path, what, at, n, refused)
    except OSError as exc:
        raise refused(f"{path}: cannot read the {what}: {exc.strerror}", str(exc.strerror)) from None
    finally:
        os.close(fd)


def _read_at(
    fd: int, path: PathLike, what: str, at: int, n: int, refused: Callable[[str, str], ArchiveCorruptError]
) -> bytearray:
    try:
        data = bytearray(n)
    except MemoryError:
        raise refused(
            f"{path}: the {what} is {n} bytes, more than this process has memory for; it was damaged, or load it "
            "where there is more memory",
            f"it is {n} bytes, more than this process has memory for",
        ) from None
    view = memoryview(data)
    got = 0
    while got < n:
        k = os.preadv(fd, [view[got:]], at + got)
        if k <= 0:
            break
        got += k
    if got != n:
        raise _changed(refused, path, what)
    return data


def _changed(refused: Callable[[str, str], ArchiveCorruptError], path: PathLike, what: str) -> ArchiveCorruptError:
    return refused(
        f"{path}: the {what} changed size while it was read; read it when no one writes it",
        "it changed size while it was read",
    )


def _open_regular(
    path: PathLike, what: str, follow: bool, refused: Callable[[str, str], ArchiveCorruptError]
) -> tuple[int, os.stat_result]:
    """``path`` opened for reading and its status, once proven a regular file: opened without blocking (a
    FIFO with no writer would hang an open that waits), and checked with fstat before anything is read (a
    FIFO, a device or a directory is refused by its type, never read until it ends). ``refused(archive
    words, why)`` makes the error."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            missing = refused(f"{path}: the {what} is missing: copy the archive completely", "no such file")
            raise missing.as_kind("missing") from None
        why = "it is a symbolic link, which the archive may not hold here" if exc.errno == errno.ELOOP else exc.strerror
        raise refused(f"{path}: cannot read the {what}: {why}", str(why)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = file_kind(st.st_mode)
            raise refused(
                f"{path}: the {what} is not a regular file (a {kind}); an archive holds regular files only. Copy the "
                "archive again.",
                f"it is a {kind}, not a regular file",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words: "directory", "FIFO", "character device", ...,
    "regular file"."""
    if stat.S_ISREG(mode):
        return "regular file"
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):  # fmt: skip
        if test(mode):
            return name
    return "special file"


def sha256_file(path: PathLike, what: str = "file") -> str:
    """Lower-case hex SHA-256 of the regular file at ``path`` (a link followed), read in 1 MiB chunks.
    Anything else (missing, a FIFO, a device, a directory) raises ``ArchiveCorruptError`` as
    ``read_regular`` does, before a byte is read: a device would never end."""
    fd, _ = _open_regular(path, what, True, lambda words, _why: ArchiveCorruptError(words))
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(fd, "rb", buffering=0, closefd=True) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
