"""The documents an archive carries (docs/FORMAT.md, "Documents"; an engine plugin's metadata), read only as the
archive's manifest lists them: the manifest proven first (sealed, and signed with the key in force), then each
document's size, SHA-256 and seal against that listing. A document the manifest does not list is refused,
whatever file lies there. What a document says is its program's business, not Foundry's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from foundry.archive import MANIFEST_NAME, listed_documents, manifest_document
from foundry.errors import ArchiveCorruptError, ArchiveSignatureError
from foundry.schema import RecordRef
from foundry.storage import read_document
from foundry.trust import KeySource, SigningKey, configured_key

from .manifests import authenticate_manifest

__all__ = ["listed_document", "listed_names", "read_archive_document"]


def read_archive_document(
    archive_dir: str | os.PathLike[str], name: str, signing_key: KeySource | None = None
) -> dict[str, Any]:
    """The JSON object of the document ``name`` that ``save_graph_manifest(..., documents=[name])`` listed in
    ``archive_dir``'s manifest, once proven to be the bytes listed.

    Without a key in force (``signing_key``, else the configured one: foundry.trust.signing) the manifest's
    seal vouches for the listing; a manifest that does not list ``name`` (saved by an older Foundry, or
    without it), a missing or changed document, or no manifest raises ``ArchiveCorruptError`` naming the file.
    With a key, the manifest's signature is proven first (and kept, for ``load_cuda_modules_and_libraries``
    to take without reading it again), and an unlisted or changed document raises ``ArchiveSignatureError``.
    Reads no more of the document than the listed size (at most ``MAX_DOCUMENT_BYTES``)."""
    archive = Path(archive_dir)
    key = configured_key(signing_key)
    ref = next((d for d in _listing(archive, key) if d.file == name), None)
    if ref is None:
        message = (
            f"{archive / name}: the manifest {archive / MANIFEST_NAME} does not list this document: the archive was "
            "saved by an older Foundry or without it, or the file was added later. Run SAVE again."
        )
        raise ArchiveSignatureError(message) if key is not None else ArchiveCorruptError(message)
    return listed_document(archive, ref, key)


def listed_document(archive: Path, ref: RecordRef, key: SigningKey | None) -> dict[str, Any]:
    """The document ``ref`` lists in the manifest of ``archive`` (proven under ``key``, where one is in force): of
    the listed size and SHA-256, sealed (storage.read_document); a refusal under a key is a signature error."""
    try:
        return read_document(archive, ref)
    except ArchiveCorruptError as exc:
        if key is None:
            raise
        raise ArchiveSignatureError(f"{exc} (the manifest, signed with key {key.key_id}, lists other bytes)") from None


def listed_names(archive_dir: str | os.PathLike[str], key: SigningKey | None) -> frozenset[str]:
    """The names of the documents the archive's manifest lists: proven signed with ``key``, or sealed without
    one. No manifest raises ``ArchiveCorruptError`` (``ArchiveSignatureError`` with a key)."""
    return frozenset(d.file for d in _listing(Path(archive_dir), key))


def _listing(archive: Path, key: SigningKey | None) -> tuple[RecordRef, ...]:
    """The documents the archive's manifest lists: with ``key``, of the manifest proven signed; without, of
    the sealed manifest, the rest of it unread (LOAD reads it next, with every check)."""
    if key is not None:
        return authenticate_manifest(archive, key).documents
    return listed_documents(manifest_document(archive), str(archive / MANIFEST_NAME))
