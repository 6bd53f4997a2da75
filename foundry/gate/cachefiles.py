"""The engine caches an archive carries (docs/FORMAT.md, "Engine caches"), for the ``files`` check: their
listing a payload LOAD reads (names, paths, bounds), and each stored file present, a regular file, of its
listed size and SHA-256, hashed in chunks as LOAD copies it. Whether LOAD may use them here (a signature, the
versions) is LOAD's decision at start-up; verify reports the archive's content."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from foundry.errors import ArchiveError
from foundry.format import CACHES_DOCUMENT, CachePayload, Manifest, cache_blob_path, read_document

from .findings import Findings, kind_of
from .report import Check, ProblemKind

__all__ = ["check_caches"]

_CHUNK = 1 << 20


def check_caches(directory: Path, manifest: Manifest, found: Findings) -> set[Path]:
    """Checks the caches the manifest's ``engine_caches.json`` lists; the resolved paths of their stored files
    (for the ``foreign`` check: they are the archive's)."""
    ref = next((d for d in manifest.documents if d.file == CACHES_DOCUMENT), None)
    if ref is None:
        return set()
    shown = directory / CACHES_DOCUMENT
    try:
        payload = CachePayload.from_json(read_document(directory, ref), str(shown))
    except ArchiveError as exc:  # the document's own damage is reported by the documents' check too
        found.add(Check.FILES, kind_of(exc), shown, f"the engine caches cannot be read: {exc}")
        return set()
    known = set()
    for sha, size in payload.blobs().items():
        path = cache_blob_path(directory, sha)
        known.add(path.resolve())
        problem = _problem(path, size, sha)
        if problem is not None:
            found.add(Check.FILES, problem[0], path, f"engine cache file: {problem[1]}")
    return known


def _problem(path: Path, size: int, sha: str) -> tuple[ProblemKind, str] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as exc:
        return (
            ProblemKind.MISSING,
            f"cannot be read ({exc.strerror}); LOAD would not use the caches. Copy the archive again",
        )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ProblemKind.CORRUPT, "not a regular file; an archive holds regular files only"
        if st.st_size != size:
            return ProblemKind.CHECKSUM, f"{st.st_size} bytes, the listing says {size}"
        h = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
    finally:
        os.close(fd)
    if h.hexdigest() != sha:
        return ProblemKind.CHECKSUM, f"content SHA-256 is {h.hexdigest()}, the listing says {sha}"
    return None
