"""Copying an archive's engine caches out to where the engine reads them, every byte checked on the way.

The destination is a new directory only this process's user can enter (0700), made here: no file there can
be a link planted beforehand, and the listing's paths (foundry.schema.caches: relative, plain names, no
``..``) cannot leave it. Each stored file is opened as the archive's files are (a regular file inside the
archive, not followed through a link, of the listed size), streamed out while hashed, and a copy whose
SHA-256 is not the listing's refuses the caches; a refusal removes the destination, so the engine is never
pointed at part of them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from foundry.errors import ArchiveError, CachesRefusedError
from foundry.schema import CACHES_DIR, CacheFile, CachePayload
from foundry.storage import inside

__all__ = ["copy_out", "read_cache_file"]

_CHUNK = 1 << 20


def copy_out(archive: Path, payload: CachePayload, dest: Path) -> dict[str, Path]:
    """Each cache of ``payload`` copied from ``archive`` into ``dest/<name>/``, which this makes (``dest`` must
    not exist); ``{name: dest/name}``. ``CachesRefusedError`` names the file at fault otherwise."""
    try:
        dest.mkdir(mode=0o700)
    except OSError as exc:
        raise CachesRefusedError(f"{dest}: cannot make the directory the engine caches go to: {exc.strerror}") from None
    try:
        out = {}
        for tree in payload.trees:
            root = dest / tree.name
            root.mkdir(mode=0o700)
            for file in tree.files:
                _copy(archive, file, root)
            out[tree.name] = root
        return out
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _copy(archive: Path, file: CacheFile, root: Path) -> None:
    target = root.joinpath(*file.path.split("/"))
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    with open(os.open(target, flags, 0o600), "wb", closefd=True) as out:
        read_cache_file(archive, file, out.write)


def read_cache_file(archive: Path, file: CacheFile, out: Callable[[memoryview], object] | None = None) -> None:
    """The stored bytes of cache file ``file`` of ``archive``, as LOAD copies them out (``out`` takes them, in
    chunks) and ``foundry verify`` checks them (without ``out``): a regular file inside the archive, not followed
    through a link, of the listed size, streamed while hashed (never more than one byte past that size). The one
    rule for a stored cache file: ``CachesRefusedError`` names the file and what is wrong."""
    blob = f"{CACHES_DIR}/{file.sha256}.bin"
    shown = archive / blob
    try:
        fd = os.open(inside(archive, blob, "engine cache file"), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except ArchiveError as exc:
        raise CachesRefusedError(str(exc)) from None
    except OSError as exc:
        why = "it is missing" if exc.errno == errno.ENOENT else exc.strerror
        refused = CachesRefusedError(f"{shown}: the engine cache file for {file.path!r} cannot be read: {why}")
        raise refused.as_kind("missing" if exc.errno == errno.ENOENT else "corrupt") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != file.bytes:
            raise CachesRefusedError(
                f"{shown}: the engine cache file for {file.path!r} is not a regular file of the {file.bytes} bytes "
                "the listing says: the archive was damaged or changed. Copy it again."
            ).as_kind("checksum" if stat.S_ISREG(st.st_mode) else "corrupt")
        h = hashlib.sha256()
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        got = 0
        while got <= file.bytes:
            n = os.readv(fd, [view[: min(_CHUNK, file.bytes + 1 - got)]])
            if n <= 0:
                break
            h.update(view[:n])
            if out is not None:
                out(view[:n])
            got += n
    finally:
        os.close(fd)
    if got != file.bytes:
        raise CachesRefusedError(f"{shown}: the engine cache file changed size while it was read").as_kind("checksum")
    if h.hexdigest() != file.sha256:
        raise CachesRefusedError(
            f"{shown}: the engine cache file for {file.path!r} has SHA-256 {h.hexdigest()}, the listing says "
            f"{file.sha256}: the archive was damaged or changed. Copy it again."
        ).as_kind("checksum")
