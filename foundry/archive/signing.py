"""Manifest signatures: HMAC-SHA256 with a secret key (docs/TRUST.md, docs/FORMAT.md "Signature").

The manifest holds the SHA-256 of every graph JSON, and each graph JSON the SHA-256 of its record,
its images and its state memory, so a signature over the manifest covers the whole archive. The
signature is an HMAC: whoever verifies holds the same secret as whoever signed.

A key is a file of secret bytes (its exact bytes, at least ``MIN_KEY_BYTES`` of them). The key in
force is, in order: the one passed explicitly, the one set with ``set_signing_key``, the file that
``$FOUNDRY_SIGNING_KEY`` names. No key configured means no signing at SAVE and no check at LOAD.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from foundry.archive.jsonfields import is_sha256
from foundry.errors import ArchiveSignatureError

__all__ = [
    "KEY_ENV",
    "MIN_KEY_BYTES",
    "SIGNATURE_ALGORITHM",
    "SIGNATURE_FIELD",
    "KeySource",
    "SigningKey",
    "as_key",
    "canonical_bytes",
    "check_signature",
    "configured_key",
    "key_id_of",
    "set_signing_key",
    "sign_document",
    "signature_key_id",
]

KEY_ENV = "FOUNDRY_SIGNING_KEY"
"""Environment variable naming the key file."""
MIN_KEY_BYTES = 16
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
    def from_file(cls, path: str | os.PathLike[str], what: str = "signing key file") -> SigningKey:
        """The key held by the file at ``path`` (its exact bytes). An unreadable file raises
        ``ArchiveSignatureError`` naming it."""
        try:
            secret = Path(path).read_bytes()
        except OSError as exc:
            raise ArchiveSignatureError(
                f"the {what} {path} cannot be read ({exc.strerror or exc}): fix the path, or unset {KEY_ENV} "
                "to work without signatures"
            ) from None
        return cls(secret, str(path))


KeySource = Union[SigningKey, bytes, str, "os.PathLike[str]"]
"""A key, its secret bytes, or the path of its file."""

_lock = threading.Lock()
_process_key: SigningKey | None = None


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
    global _process_key
    key = None if source is None else as_key(source)
    with _lock:
        _process_key = key
    return key


def configured_key(explicit: KeySource | None = None) -> SigningKey | None:
    """The key in force: ``explicit``, else the one ``set_signing_key`` set, else the file
    ``$FOUNDRY_SIGNING_KEY`` names (an empty value counts as unset), else None."""
    if explicit is not None:
        return as_key(explicit)
    with _lock:
        key = _process_key
    if key is not None:
        return key
    path = os.environ.get(KEY_ENV, "")
    if not path:
        return None
    return SigningKey.from_file(path, f"signing key file named by {KEY_ENV},")


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
