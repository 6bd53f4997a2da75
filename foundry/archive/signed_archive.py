"""Signed archives: signing the manifest at SAVE, and what LOAD proves before it touches the GPU.

With a key configured (foundry.archive.signing), LOAD accepts a graph only if the manifest of the
archive its metadata names is signed with that key, and lists the graph's JSON (at its path) with the
SHA-256 the file has now. The JSON then authenticates the rest: LOAD checks the record, the images and
the state memory against the SHA-256 values it holds. Everything here is CPU work on files.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

from foundry.archive.atomic import sha256_bytes, sha256_file
from foundry.archive.graphfile import resolve_archive_dir
from foundry.archive.graphmeta import GraphMeta
from foundry.archive.jsonfields import check_format, load_json
from foundry.archive.manifest import MANIFEST_FORMAT, MANIFEST_FORMAT_VERSIONS, MANIFEST_NAME, Manifest
from foundry.archive.signing import SigningKey, check_signature, sign_document
from foundry.errors import ArchiveSignatureError

__all__ = ["authenticate_graph", "authenticate_manifest", "sign_manifest"]

PathLike = str | os.PathLike[str]


def sign_manifest(manifest: Manifest, key: SigningKey) -> Manifest:
    """``manifest`` with its ``signature`` set: HMAC-SHA256 of its JSON without the signature."""
    unsigned = dataclasses.replace(manifest, signature=None)
    return dataclasses.replace(manifest, signature=sign_document(unsigned.to_json(), key))


@dataclasses.dataclass(frozen=True)
class _Verified:
    data_sha256: str
    manifest: Manifest
    listing: dict[Path, str]  # resolved graph JSON path -> its SHA-256 in the manifest


_lock = threading.Lock()
_verified: dict[tuple[Path, str], _Verified] = {}


def _verify(archive_dir: Path, key: SigningKey) -> _Verified:
    path = archive_dir / MANIFEST_NAME
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise ArchiveSignatureError(
            f"{archive_dir} has no {MANIFEST_NAME}, so it is not signed, and signing key {key.key_id} ({key.source}) "
            "is configured: only signed archives are accepted. Run save_graph_manifest() with the key configured."
        ) from None
    digest = sha256_bytes(data)
    cache_key = (archive_dir.resolve(), key.key_id)
    with _lock:
        known = _verified.get(cache_key)
    if known is not None and known.data_sha256 == digest:
        return known
    doc = check_format(load_json(data, str(path)), MANIFEST_FORMAT, MANIFEST_FORMAT_VERSIONS, str(path))
    check_signature(doc, key, str(path))
    manifest = Manifest.from_json(doc, str(path))
    base = archive_dir.resolve()
    listing = {(base / g.json).resolve(): g.json_sha256 for g in manifest.graphs}
    result = _Verified(digest, manifest, listing)
    with _lock:
        _verified[cache_key] = result
    return result


def authenticate_manifest(archive_dir: PathLike, key: SigningKey) -> Manifest:
    """The manifest of ``archive_dir`` once its signature is proven to be ``key``'s.

    Raises ``ArchiveSignatureError`` when there is no manifest, or it is unsigned, signed with
    another key, or changed after signing; ``ArchiveCorruptError``/``ArchiveForeignError``/
    ``ArchiveVersionError`` when it cannot be read as a manifest at all.
    """
    return _verify(Path(archive_dir), key).manifest


def authenticate_graph(json_path: PathLike, meta: GraphMeta, key: SigningKey, json_sha256: str | None = None) -> None:
    """Proves that the graph JSON ``json_path`` (whose parsed metadata is ``meta``) is listed, at this
    path and with the SHA-256 of the bytes ``meta`` was parsed from (``json_sha256``; without it, of
    the file as it is now), in the signed manifest of the archive ``meta`` names.

    Raises as ``authenticate_manifest``, and ``ArchiveSignatureError`` when the graph is not listed or
    its JSON changed after signing.
    """
    json_path = Path(json_path)
    archive = resolve_archive_dir(json_path, meta)
    verified = _verify(archive, key)
    expected = verified.listing.get(json_path.resolve())
    if expected is None:
        raise ArchiveSignatureError(
            f"{json_path} is not listed in the signed manifest {archive / MANIFEST_NAME}: it was saved after the "
            "manifest was signed, or does not belong to that archive. Save the manifest again with the signing key "
            "configured, or load only graphs the archive lists."
        )
    actual = json_sha256 if json_sha256 is not None else sha256_file(json_path)
    if actual != expected:
        raise ArchiveSignatureError(
            f"{json_path} was changed after the archive was signed: its SHA-256 is {actual}, the signed manifest "
            f"{archive / MANIFEST_NAME} says {expected}. Do not load it; save the archive again from a trusted source."
        )
