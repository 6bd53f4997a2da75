"""SAVE: an engine's caches into the archive (docs/FORMAT.md, "Engine caches"). Each file of a cache
directory the engine plugin names is copied byte for byte into ``caches/<sha256>.bin`` and listed, under its
path in that directory, in the document ``engine_caches.json``; the caller lists the document in the
manifest it writes next (``save_graph_manifest(..., documents=[..., name])``), which makes the files durable
with the rest and covers them with its seal and signature. Packed again into a finished archive
(``update_manifest``: the engine compiled more kernels since), the listing is rewritten and the manifest lists
it again (``relist_documents``); a file already copied and unchanged since is not read again.

Only regular files are copied, each streamed (never whole in memory) and bounded as a reader bounds them
(foundry.schema.caches), so what SAVE writes LOAD can read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from foundry.errors import ArchiveError, SaveError
from foundry.schema import (
    CACHES_DIR,
    CACHES_DOCUMENT,
    MAX_CACHE_BYTES,
    MAX_CACHE_FILE_BYTES,
    MAX_CACHE_FILES,
    CacheFile,
    CachePayload,
    CacheTree,
    cache_name_problem,
    cache_path_problem,
)
from foundry.schema.jsondocs import load_sealed
from foundry.storage import TEMP_SUFFIX, cache_blob_path, write_atomic, write_document

from .manifest import relist_documents

__all__ = ["pack_engine_caches"]

_CHUNK = 1 << 20
# What this process copied, by (archive, source path): the source's (device, inode, size, mtime) and the listing
# it gave, so that packing the same caches again reads only what changed (the blob still present).
_COPIED: dict[tuple[str, str], tuple[tuple[int, int, int, int], CacheFile]] = {}


def pack_engine_caches(
    archive_dir: str | os.PathLike[str],
    identity: Mapping[str, str],
    trees: Mapping[str, Mapping[str, str | os.PathLike[str]]],
    update_manifest: bool = False,
) -> str:
    """Copies each cache of ``trees`` (``name -> {path in the cache directory: the file to copy}``) into
    ``archive_dir`` and writes the listing with ``identity`` (what the caches were made with: the reader uses
    them only where each value is its own); returns the document's name, for the manifest to list.

    A name or path a reader would refuse, a file that is not a regular file (a symbolic link, a device), one
    that changes while copied, or files past the bounds of foundry.schema.caches raise ``SaveError`` naming it;
    the archive then holds no listing (files already copied are content-addressed and harmless).

    ``update_manifest``: the archive is finished (its manifest written), and this packs its caches again: the
    new listing replaces the old one and the manifest lists it (signed again with the key in force). Anything
    refused leaves the archive as it was, the old listing and manifest included."""
    archive = Path(archive_dir)
    (archive / CACHES_DIR).mkdir(parents=True, exist_ok=True)
    listed: list[CacheTree] = []
    count = total = 0
    for name, sources in trees.items():
        problem = cache_name_problem(name)
        if problem:
            raise SaveError(f"engine cache {name!r:.60} {problem}")
        files = []
        for rel in sorted(sources):
            problem = cache_path_problem(rel)
            if problem:
                raise SaveError(f"{sources[rel]}: the cache path {rel!r:.120} {problem}; it cannot be packed")
            count += 1
            if count > MAX_CACHE_FILES:
                raise SaveError(f"the engine caches hold more than {MAX_CACHE_FILES} files, more than LOAD reads")
            file = _copied(Path(sources[rel]), rel, archive)
            total += file.bytes
            if total > MAX_CACHE_BYTES:
                raise SaveError(
                    f"the engine caches hold more than {MAX_CACHE_BYTES} bytes, more than LOAD reads: save without "
                    "packing them"
                )
            files.append(file)
        listed.append(CacheTree(name, tuple(files)))
    payload = CachePayload(tuple((str(k), str(v)) for k, v in identity.items()), tuple(listed))
    CachePayload.from_json(payload.to_json(), CACHES_DOCUMENT)  # what LOAD would refuse is refused here
    if not update_manifest:
        write_document(archive, CACHES_DOCUMENT, payload.to_json())
        return CACHES_DOCUMENT
    listing = archive / CACHES_DOCUMENT
    try:
        before: bytes | None = listing.read_bytes()
    except FileNotFoundError:
        before = None
    write_document(archive, CACHES_DOCUMENT, payload.to_json())
    try:
        relist_documents(archive, [CACHES_DOCUMENT])
    except BaseException:
        # The manifest still lists the old listing: its bytes go back, so that the caches packed before stay usable.
        if before is None:
            listing.unlink(missing_ok=True)
        else:
            write_atomic(listing, before)
        raise
    _drop_unlisted(archive, before, payload)
    return CACHES_DOCUMENT


def _drop_unlisted(archive: Path, before: bytes | None, now: CachePayload) -> None:
    """Removes the stored files the old listing (``before``) held and the new one does not (a cached file that
    changed between two packs): every stored file of the archive stays a listed one."""
    if before is None:
        return
    try:
        old = CachePayload.from_json(load_sealed(before, CACHES_DOCUMENT), CACHES_DOCUMENT)
    except (ArchiveError, ValueError):
        return  # not one this Foundry wrote: its files are left as they are
    kept = {f.sha256 for tree in now.trees for f in tree.files}
    for sha in {f.sha256 for tree in old.trees for f in tree.files} - kept:
        with contextlib.suppress(OSError):
            cache_blob_path(archive, sha).unlink()


def _copied(source: Path, rel: str, archive: Path) -> CacheFile:
    """``_copy``, unless this process copied ``source`` into ``archive`` before and it has not changed since."""
    memo = (str(archive.resolve()), str(source))
    try:
        st = os.stat(source, follow_symlinks=False)
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None
    seen = _COPIED.get(memo)
    if stamp is not None and seen is not None and seen[0] == stamp:
        file = seen[1]
        if cache_blob_path(archive, file.sha256).is_file():
            return CacheFile(rel, file.bytes, file.sha256)
    file = _copy(source, rel, archive)
    if stamp is not None:
        _COPIED[memo] = (stamp, file)
    return file


def _copy(source: Path, rel: str, archive: Path) -> CacheFile:
    """``source`` streamed into a temporary file of ``caches/`` while hashed, then named by its SHA-256."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SaveError(f"{source}: the engine cache file cannot be read ({exc.strerror}): it is not a regular file, "
                        "or was removed while SAVE ran") from None  # fmt: skip
    tmp = archive / CACHES_DIR / f".{secrets.token_hex(8)}{TEMP_SUFFIX}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SaveError(f"{source}: the engine cache holds something other than a regular file here; remove it")
        if st.st_size > MAX_CACHE_FILE_BYTES:
            raise SaveError(f"{source}: {st.st_size} bytes, more than the {MAX_CACHE_FILE_BYTES} LOAD reads of a file")
        digest, size = _stream(fd, tmp)
        if size != st.st_size or os.fstat(fd).st_size != size:
            raise SaveError(f"{source}: the engine cache file changed while SAVE copied it; save again")
        os.replace(tmp, cache_blob_path(archive, digest))  # the same bytes for another path: one blob
        return CacheFile(rel, size, digest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:
        os.close(fd)


def _stream(fd: int, target: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    with open(out, "wb", closefd=True) as f:
        while True:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            h.update(view[:n])
            f.write(view[:n])
            size += n
            if size > MAX_CACHE_FILE_BYTES:
                break  # the caller refuses it: the file grew past the bound while read
    return h.hexdigest(), size
