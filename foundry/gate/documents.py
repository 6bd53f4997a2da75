"""The documents the manifest lists (docs/FORMAT.md, "Documents"; an engine plugin's metadata), for the
``files`` check: each present, of its listed size and SHA-256, sealed, and a JSON object, as LOAD reads it
(foundry.trust.read_archive_document). What a document says is its program's business, not Foundry's."""

from __future__ import annotations

from pathlib import Path

from foundry.errors import ArchiveError
from foundry.format import Manifest, load_sealed

from .files import _read_checked
from .findings import Findings, kind_of
from .report import Check

__all__ = ["check_documents"]


def check_documents(directory: Path, manifest: Manifest, found: Findings) -> None:
    for ref in manifest.documents:
        path, data = _read_checked(directory, ref.file, ref.bytes, ref.sha256, "document", "the manifest", found)
        if data is None:
            continue
        try:
            load_sealed(data, str(path))
        except ArchiveError as exc:
            found.add(Check.FILES, kind_of(exc), path, str(exc))
