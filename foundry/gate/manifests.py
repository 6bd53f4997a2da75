"""The manifest as LOAD trusts it: sealed, of a known version, consistent, and under a key signed with it
(gate/signature.py); each archive's read once per batch of graphs (``manifests_read_once``) and kept, by its
bytes' SHA-256, for the process."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from foundry._state import ProcessState
from foundry.archive import MANIFEST_NAME, Manifest, manifest_document, parse_manifest_doc
from foundry.errors import ArchiveSignatureError
from foundry.schema import GraphEntry, RegionSpec
from foundry.storage import PathLike, inside, read_regular, real_name, real_path, real_paths_memoized, sha256_bytes
from foundry.trust import KeySource, SigningKey, configured_key

from .signature import check_signature

__all__ = [
    "ProvenManifest",
    "archive_manifest",
    "authenticate_manifest",
    "manifests_read_once",
    "no_manifest",
    "proven_manifest",
]


@dataclass(frozen=True)
class ProvenManifest:
    """A manifest proven, the SHA-256 of the bytes it was read from, and its graphs by the resolved path of
    their JSON (``real_name``)."""

    data_sha256: str
    manifest: Manifest
    listing: dict[str, GraphEntry]


@dataclass
class _Proven:
    """The manifests proven (sealed; signed, under a key), by (resolved archive directory, key id)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    verified: dict[tuple[Path, str], ProvenManifest] = field(default_factory=dict)


_STATE = ProcessState("gate.manifests", _Proven)

# The manifests a batch of graphs read on this thread were checked against (``manifests_read_once``).
_BATCH = threading.local()


@contextmanager
def manifests_read_once() -> Iterator[None]:
    """Within, on this thread, each archive's manifest is read, hashed and checked once, and every
    graph read in the block is authenticated against that one reading: LOAD reads dozens of graphs
    (and, for each member, its template again) together, on the calling thread before its loader starts,
    where a manifest read per graph would cost more than the graphs. Outside, every call reads it afresh."""
    outer = getattr(_BATCH, "seen", None)
    _BATCH.seen = {} if outer is None else outer
    try:
        with real_paths_memoized():
            yield
    finally:
        _BATCH.seen = outer


def proven_manifest(archive_dir: Path, key: SigningKey | None) -> ProvenManifest | None:
    """The manifest of ``archive_dir``, sealed and (with ``key``) proven signed, with its graphs by
    resolved path; None when the archive has no manifest."""
    batch: dict[tuple[Path, str], ProvenManifest | None] | None = getattr(_BATCH, "seen", None)
    batch_key = (archive_dir, key.key_id if key is not None else "")
    if batch is not None and batch_key in batch:
        return batch[batch_key]
    result = _read_verified(archive_dir, key)
    if batch is not None:
        batch[batch_key] = result
    return result


def no_manifest(archive_dir: Path, key: SigningKey) -> ArchiveSignatureError:
    return ArchiveSignatureError(
        f"{archive_dir} has no {MANIFEST_NAME}, so it is not signed, and signing key {key.key_id} ({key.source}) "
        "is configured: only signed archives are accepted. Run save_graph_manifest() with the key configured."
    )


def _read_verified(archive_dir: Path, key: SigningKey | None) -> ProvenManifest | None:
    """None where the archive has no manifest."""
    path = archive_dir / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        return None
    data = read_regular(inside(archive_dir, MANIFEST_NAME, "manifest"), "manifest")
    digest = sha256_bytes(data)
    cache_key = (real_path(archive_dir), key.key_id if key is not None else "")
    state = _STATE.get()
    with state.lock:
        known = state.verified.get(cache_key)
    if known is not None and known.data_sha256 == digest:
        return known
    doc = parse_manifest_doc(data, str(path))
    if key is not None:
        check_signature(doc, key, str(path))
    manifest = Manifest.from_json(doc, str(path))
    base = real_name(archive_dir)
    listing = {real_name(os.path.join(base, g.json)): g for g in manifest.graphs}
    result = ProvenManifest(digest, manifest, listing)
    with state.lock:
        state.verified[cache_key] = result
    return result


def authenticate_manifest(archive_dir: PathLike, key: SigningKey) -> Manifest:
    """The manifest of ``archive_dir`` once its signature is proven to be ``key``'s.

    Raises ``ArchiveSignatureError`` when there is no manifest, or it is unsigned, signed with
    another key, or changed after signing; ``ArchiveCorruptError``/``ArchiveForeignError``/
    ``ArchiveVersionError`` when it cannot be read as a manifest at all.
    """
    verified = proven_manifest(Path(archive_dir), key)
    if verified is None:
        raise no_manifest(Path(archive_dir), key)
    return verified.manifest


def archive_manifest(archive_dir: PathLike, key: SigningKey | None) -> Manifest | None:
    """The manifest of ``archive_dir`` as LOAD trusts it (sealed; with ``key``, proven signed with it), read
    once within ``manifests_read_once``; None where the directory has none (whatever the key: a graph outside
    any archive is not refused for that here). Raises as ``authenticate_manifest`` for one that is there."""
    verified = proven_manifest(Path(archive_dir), key)
    return None if verified is None else verified.manifest


def read_archive_region(archive_dir: PathLike, signing_key: KeySource | None = None) -> RegionSpec:
    """The region the archive's graphs were saved in, as its manifest states it: the one place a finished archive
    keeps it (docs/FORMAT.md; a graph and an engine's metadata refer to it). The manifest is proven as LOAD
    proves it: sealed, and signed with the key in force (``signing_key``, else the configured one), raising as
    ``authenticate_manifest``; an archive without one raises ``ArchiveCorruptError`` (``ArchiveSignatureError``
    under a key)."""
    archive = Path(archive_dir)
    key = configured_key(signing_key)
    if key is not None:
        return authenticate_manifest(archive, key).region
    proven = proven_manifest(archive, None)
    if proven is None:
        manifest_document(archive)  # raises: no manifest, named as every reader names it
        raise AssertionError("unreachable")
    return proven.manifest.region
