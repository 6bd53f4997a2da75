"""Manifest signatures: HMAC-SHA256 with a secret key (docs/TRUST.md, docs/FORMAT.md "Signature").

The manifest holds the SHA-256 of every graph JSON, and each graph JSON the SHA-256 of its record,
its images and its state memory, so a signature over the manifest covers the whole archive. The
signature is an HMAC: whoever verifies holds the same secret as whoever signed.

A key is a file of secret bytes (its exact bytes, at least ``MIN_KEY_BYTES`` of them). The key in
force is, in order: the one passed explicitly, the one set with ``set_signing_key``, the file that
``$FOUNDRY_SIGNING_KEY`` names. No key configured means no signing at SAVE and no check at LOAD.

Signed archives: with a key configured, LOAD accepts a graph only if the manifest of the archive its
metadata names is signed with that key, and lists the graph's JSON (at its path) with the SHA-256 the
file has now. The JSON then authenticates the rest: LOAD checks the record, the images and the state
memory against the SHA-256 values it holds. Everything here is CPU work on files.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Union

from foundry._state import ProcessState
from foundry.errors import ArchiveCorruptError, ArchiveSignatureError
from foundry.format import (
    MANIFEST_NAME,
    GraphEntry,
    GraphMeta,
    Manifest,
    PathLike,
    VariableRef,
    inside,
    inside_name,
    is_sha256,
    parse_manifest_doc,
    read_regular,
    real_name,
    real_path,
    real_paths_memoized,
    relative_path_problem,
    resolve_archive_dir,
    sha256_bytes,
    sha256_file,
)

__all__ = [
    "KEY_ENV",
    "MAX_KEY_BYTES",
    "MIN_KEY_BYTES",
    "SIGNATURE_ALGORITHM",
    "SIGNATURE_FIELD",
    "KeySource",
    "SigningKey",
    "archive_manifest",
    "as_key",
    "authenticate_graph",
    "authenticate_manifest",
    "canonical_bytes",
    "check_signature",
    "configured_key",
    "key_id_of",
    "manifest_disagreement",
    "manifests_read_once",
    "set_signing_key",
    "sign_document",
    "sign_manifest",
    "signature_key_id",
]

KEY_ENV = "FOUNDRY_SIGNING_KEY"
"""Environment variable naming the key file."""
MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 1 << 16
"""Bound on reading a key file: a key of 32 random bytes is plenty, and no key file comes near this."""
SIGNATURE_ALGORITHM = "hmac-sha256"
SIGNATURE_FIELD = "signature"


def key_id_of(secret: bytes) -> str:
    """The public name of a key: the first 16 hex digits of the SHA-256 of its bytes."""
    return hashlib.sha256(secret).hexdigest()[:16]


@dataclass(frozen=True)
class SigningKey:
    """A secret key and where it came from (``source`` names it in messages; the secret never is)."""

    secret: bytes = field(repr=False)
    source: str = "<bytes>"

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_KEY_BYTES:
            raise ArchiveSignatureError(
                f"signing key {self.source} holds {len(self.secret)} bytes; a key needs at least {MIN_KEY_BYTES} "
                "secret bytes. Make one with `head -c 32 /dev/urandom > foundry.key`."
            )

    @property
    def key_id(self) -> str:
        return key_id_of(self.secret)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], what: str = "signing key file", next_step: str = "fix the path"
    ) -> SigningKey:
        """The key held by the file at ``path`` (its exact bytes), read as an archive's files are: a regular
        file of at most ``MAX_KEY_BYTES``. Anything else (missing, unreadable, a FIFO, a device, too large)
        raises ``ArchiveSignatureError`` naming it and ``next_step``."""
        try:
            secret = read_regular(path, what, limit=MAX_KEY_BYTES, follow=True, next_step=next_step)
        except ArchiveCorruptError as exc:
            raise ArchiveSignatureError(str(exc)) from None
        return cls(bytes(secret), str(path))


KeySource = Union[SigningKey, bytes, str, "os.PathLike[str]"]
"""A key, its secret bytes, or the path of its file."""


@dataclass(frozen=True)
class _Verified:
    data_sha256: str
    manifest: Manifest
    listing: dict[str, GraphEntry]  # by the resolved path of the graph JSON (``real_name``)


@dataclass
class _Signing:
    """The key ``set_signing_key`` set (a forked child keeps it: it is configuration), and the
    manifests proven signed, by (resolved archive directory, key id)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    key: SigningKey | None = None
    verified: dict[tuple[Path, str], _Verified] = field(default_factory=dict)


_STATE = ProcessState("trust.signing", _Signing, after_fork=lambda s: _Signing(key=s.key))

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


def as_key(source: KeySource) -> SigningKey:
    """A ``SigningKey`` from a key, its secret bytes, or the path of its file."""
    if isinstance(source, SigningKey):
        return source
    if isinstance(source, bytes):
        return SigningKey(source)
    return SigningKey.from_file(source)


def set_signing_key(source: KeySource | None) -> SigningKey | None:
    """Sets the key this process signs with at SAVE and requires at LOAD (None: back to
    ``$FOUNDRY_SIGNING_KEY``). Returns the key set."""
    key = None if source is None else as_key(source)
    state = _STATE.get()
    with state.lock:
        state.key = key
    return key


def configured_key(explicit: KeySource | None = None) -> SigningKey | None:
    """The key in force: ``explicit``, else the one ``set_signing_key`` set, else the file
    ``$FOUNDRY_SIGNING_KEY`` names (an empty value counts as unset), else None."""
    if explicit is not None:
        return as_key(explicit)
    state = _STATE.get()
    with state.lock:
        key = state.key
    if key is not None:
        return key
    path = os.environ.get(KEY_ENV, "")
    if not path:
        return None
    return SigningKey.from_file(
        path, f"signing key file named by {KEY_ENV},", f"fix the path, or unset {KEY_ENV} to work without signatures"
    )


def canonical_bytes(doc: Mapping[str, Any]) -> bytes:
    """What a signature covers: ``doc`` without its ``signature`` key, as compact JSON with sorted
    keys (UTF-8, no spaces, no NaN). Equal documents give equal bytes however they were indented."""
    body = {k: v for k, v in doc.items() if k != SIGNATURE_FIELD}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def _mac(doc: Mapping[str, Any], key: SigningKey) -> str:
    return hmac.new(key.secret, canonical_bytes(doc), hashlib.sha256).hexdigest()


def sign_document(doc: Mapping[str, Any], key: SigningKey) -> dict[str, str]:
    """The ``signature`` object for ``doc`` (any existing signature in it is ignored)."""
    return {"algorithm": SIGNATURE_ALGORITHM, "key_id": key.key_id, "hmac": _mac(doc, key)}


def signature_key_id(doc: Mapping[str, Any]) -> str | None:
    """The key id a document claims to be signed with, or None when it carries no readable signature."""
    sig = doc.get(SIGNATURE_FIELD)
    if isinstance(sig, dict) and isinstance(sig.get("key_id"), str):
        return str(sig["key_id"])
    return None


def check_signature(doc: Mapping[str, Any], key: SigningKey, source: str) -> None:
    """Proves ``doc`` (the parsed manifest ``source``) was signed with ``key`` and not changed since.

    Raises ``ArchiveSignatureError`` saying which of these it is: unsigned, a signature in an unknown
    form, signed with another key (both key ids named), or a signature that does not match the
    content (changed after signing).
    """
    sig = doc.get(SIGNATURE_FIELD)
    if sig is None:
        raise ArchiveSignatureError(
            f"{source} is not signed, and signing key {key.key_id} ({key.source}) is configured, so only archives "
            "signed with it are accepted. Save the archive again with that key configured, or check where it "
            "came from."
        )
    if (
        not isinstance(sig, dict)
        or sig.get("algorithm") != SIGNATURE_ALGORITHM
        or not isinstance(sig.get("key_id"), str)
        or not is_sha256(sig.get("hmac"))
    ):
        raise ArchiveSignatureError(
            f"{source}: the signature is not a {SIGNATURE_ALGORITHM} signature this Foundry can check "
            f"(found {json.dumps(sig)[:160]}); the manifest was altered, or written by a newer Foundry"
        )
    if sig["key_id"] != key.key_id:
        raise ArchiveSignatureError(
            f"{source} is signed with key {sig['key_id']}, not with the configured key {key.key_id} ({key.source}). "
            "Configure the key the archive was signed with, or save it again with this one."
        )
    if not hmac.compare_digest(str(sig["hmac"]), _mac(doc, key)):
        raise ArchiveSignatureError(
            f"{source}: the signature does not match the content: the manifest was changed after it was signed "
            f"with key {key.key_id}. Do not load this archive; save it again from a trusted source."
        )


# ------------------------------------------------------------------ signed archives
def sign_manifest(manifest: Manifest, key: SigningKey) -> Manifest:
    """``manifest`` with its ``signature`` set: HMAC-SHA256 of its JSON without the signature."""
    unsigned = replace(manifest, signature=None)
    return replace(manifest, signature=sign_document(unsigned.to_json(), key))


def _verify(archive_dir: Path, key: SigningKey | None) -> _Verified | None:
    """The manifest of ``archive_dir``, sealed and (with ``key``) proven signed, with its graphs by
    resolved path; None when the archive has no manifest."""
    batch: dict[tuple[Path, str], _Verified | None] | None = getattr(_BATCH, "seen", None)
    batch_key = (archive_dir, key.key_id if key is not None else "")
    if batch is not None and batch_key in batch:
        return batch[batch_key]
    result = _read_verified(archive_dir, key)
    if batch is not None:
        batch[batch_key] = result
    return result


def _no_manifest(archive_dir: Path, key: SigningKey) -> ArchiveSignatureError:
    return ArchiveSignatureError(
        f"{archive_dir} has no {MANIFEST_NAME}, so it is not signed, and signing key {key.key_id} ({key.source}) "
        "is configured: only signed archives are accepted. Run save_graph_manifest() with the key configured."
    )


def _read_verified(archive_dir: Path, key: SigningKey | None) -> _Verified | None:
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
    result = _Verified(digest, manifest, listing)
    with state.lock:
        state.verified[cache_key] = result
    return result


def authenticate_manifest(archive_dir: PathLike, key: SigningKey) -> Manifest:
    """The manifest of ``archive_dir`` once its signature is proven to be ``key``'s.

    Raises ``ArchiveSignatureError`` when there is no manifest, or it is unsigned, signed with
    another key, or changed after signing; ``ArchiveCorruptError``/``ArchiveForeignError``/
    ``ArchiveVersionError`` when it cannot be read as a manifest at all.
    """
    verified = _verify(Path(archive_dir), key)
    if verified is None:
        raise _no_manifest(Path(archive_dir), key)
    return verified.manifest


def archive_manifest(archive_dir: PathLike, key: SigningKey | None) -> Manifest | None:
    """The manifest of ``archive_dir`` as LOAD trusts it (sealed; with ``key``, proven signed with it), read
    once within ``manifests_read_once``; None where the directory has none (whatever the key: a graph outside
    any archive is not refused for that here). Raises as ``authenticate_manifest`` for one that is there."""
    verified = _verify(Path(archive_dir), key)
    return None if verified is None else verified.manifest


def authenticate_graph(
    json_path: PathLike, meta: GraphMeta, key: SigningKey | None, json_sha256: str | None = None
) -> None:
    """Proves that the graph JSON ``json_path`` (whose parsed metadata is ``meta``) is the one its
    archive's manifest lists: at this path (a file in the archive, not a link out of it, where the manifest
    names it inside the archive), with the SHA-256 of the bytes ``meta`` was parsed from
    (``json_sha256``; without it, of the file as it is now), and agreeing with what the manifest says
    of it (name, record, topology, machine identity, region, images).

    With ``key``, the manifest must exist and be signed with it (``ArchiveSignatureError`` otherwise,
    and for a graph unlisted or changed after signing). Without, an archive that has no manifest yet
    (graphs saved, manifest not written) passes; one that has a manifest must list the graph as it is
    (``ArchiveCorruptError`` otherwise). Raises as ``authenticate_manifest`` for an unreadable manifest.
    """
    json_path = json_path if isinstance(json_path, Path) else Path(json_path)
    archive = resolve_archive_dir(json_path, meta)
    verified = _verify(archive, key)
    if verified is None:
        if key is not None:
            raise _no_manifest(archive, key)
        return
    error = ArchiveSignatureError if key is not None else ArchiveCorruptError
    entry = verified.listing.get(real_name(json_path))
    if entry is None:
        what = "signed manifest" if key is not None else "manifest"
        raise error(
            f"{json_path} is not listed in the {what} {archive / MANIFEST_NAME}: it was saved after the manifest was "
            "written, or does not belong to that archive. Save the manifest again (save_graph_manifest), or load only "
            "graphs the archive lists."
        )
    if relative_path_problem(entry.json) is None:  # listed inside the archive: no link may lead out of it
        inside_name(archive, entry.json, "graph metadata")
    actual = json_sha256 if json_sha256 is not None else sha256_file(json_path)
    if actual != entry.json_sha256:
        raise error(
            f"{json_path} was changed after the manifest was written: its SHA-256 is {actual}, the manifest "
            f"{archive / MANIFEST_NAME} says {entry.json_sha256}. Do not load it; save the archive again."
        )
    problem = manifest_disagreement(verified.manifest, entry, meta)
    if problem:
        raise ArchiveCorruptError(
            f"{json_path} and the manifest {archive / MANIFEST_NAME} disagree: {problem}. The two come from different "
            "saves; save the archive again."
        )


def manifest_disagreement(manifest: Manifest, entry: GraphEntry, meta: GraphMeta) -> str | None:
    """What a graph's metadata and its manifest (and manifest entry) state differently, or None."""
    assert meta.record is not None
    if (entry.name, entry.record_sha256, entry.topology) != (meta.name, meta.record.sha256, meta.topology):
        return "the graph's name, record SHA-256 or topology key"
    if manifest.identity != meta.identity:
        return "the machine the graph was saved on (identity)"
    ours, theirs = manifest.region, meta.region
    if (ours.base, ours.size, ours.granularity) != (theirs.base, theirs.size, theirs.granularity):
        return f"the region (base {ours.base:#x} size {ours.size} in the manifest, {theirs.base:#x} {theirs.size} here)"
    images = {e.sha256: e for e in manifest.images}
    for ref in meta.images:
        listed = images.get(ref.sha256)
        if listed is None or (listed.bytes, listed.format) != (ref.bytes, ref.format):
            return f"kernel image {ref.sha256} (not listed with the same size and format)"
        if None not in (listed.variables, ref.variables) and listed.variables != ref.variables:
            here, there = _listing(ref.variables), _listing(listed.variables)
            return (
                f"the module variables of kernel image {ref.sha256}, which load_cuda_modules_and_libraries writes as "
                f"the manifest lists them (here {here}, in the manifest {there})"
            )
    return None


def _listing(variables: tuple[VariableRef, ...] | None) -> str:
    return "[" + ", ".join(f"{v.name} ({v.bytes} bytes, {v.sha256[:12]})" for v in variables or ()) + "]"
