"""The engine caches an archive carries (docs/FORMAT.md, "Engine caches"), for the ``files`` check: their
listing a payload LOAD reads (names, paths, bounds), and each stored file read as LOAD copies it out
(gate/cachecopy.py), refused with LOAD's words. Whether LOAD may use them here (a signature, the versions) is
LOAD's decision at start-up; verify reports the archive's content."""

from __future__ import annotations

from pathlib import Path

from foundry.archive import Manifest
from foundry.errors import ArchiveError
from foundry.schema import CACHES_DOCUMENT, CachePayload
from foundry.storage import cache_blob_path
from foundry.trust import SigningKey

from .cachecopy import read_cache_file
from .caches import caches_refused
from .documents import listed_document
from .findings import Findings
from .report import Check

__all__ = ["check_caches"]


def check_caches(directory: Path, manifest: Manifest, key: SigningKey | None, found: Findings) -> set[Path]:
    """Checks the caches the manifest's ``engine_caches.json`` lists, as LOAD reads them (``key``: the signature
    verify was given): their listing, and each stored file once (``read_cache_file``); the resolved paths of
    their stored files (for the ``foreign`` check: they are the archive's)."""
    ref = next((d for d in manifest.documents if d.file == CACHES_DOCUMENT), None)
    if ref is None:
        return set()
    shown = directory / CACHES_DOCUMENT
    try:
        payload = CachePayload.from_json(listed_document(directory, ref, key), str(shown))
    except ArchiveError as exc:  # the document's own damage is reported by the documents' check too
        found.refuse(Check.FILES, shown, caches_refused(directory, exc))
        return set()
    known = set()
    files = {f.sha256: f for tree in payload.trees for f in tree.files}  # one blob serves every file of its bytes
    for sha, file in files.items():
        path = cache_blob_path(directory, sha)
        known.add(path.resolve())
        try:
            read_cache_file(directory, file)
        except ArchiveError as exc:
            found.refuse(Check.FILES, path, exc)
    return known
