"""Keys and signing: the key in force, and the HMAC-SHA256 signature SAVE puts on a manifest (docs/TRUST.md,
docs/FORMAT.md "Signature").

The manifest holds the SHA-256 of every graph JSON, and each graph JSON the SHA-256 of its record,
its images and its state memory, so a signature over the manifest covers the whole archive. The
signature is an HMAC: whoever verifies holds the same secret as whoever signed.

A key is a file of secret bytes (its exact bytes, at least ``MIN_KEY_BYTES`` of them). The key in
force is, in order: the one passed explicitly, the one set with ``set_signing_key``, the file that
``$FOUNDRY_SIGNING_KEY`` names. No key configured means no signing at SAVE and no check at LOAD. Whether a
signature stands, and what it then vouches for, is the gate's (foundry.gate: signature.py, manifests.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

from foundry._state import ProcessState
from foundry.archive import Manifest
from foundry.errors import ArchiveCorruptError, ArchiveSignatureError
from foundry.storage import read_regular

__all__ = [
    "KEY_ENV",
    "MAX_KEY_BYTES",
    "MIN_KEY_BYTES",
    "SIGNATURE_ALGORITHM",
    "SIGNATURE_FIELD",
    "KeySource",
    "SigningKey",
    "as_key",
    "canonical_bytes",
    "configured_key",
    "key_id_of",
    "mac",
    "set_signing_key",
    "sign_document",
    "sign_manifest",
    "signature_key_id",
    "signing_key_id",
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


@dataclass
class _Signing:
    """The key ``set_signing_key`` set (a forked child keeps it: it is configuration)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    key: SigningKey | None = None


_STATE = ProcessState("trust.signing", _Signing, after_fork=lambda s: _Signing(key=s.key))


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


def signing_key_id() -> str | None:
    """The id of the signing key in force (SAVE signs with it, LOAD proves with it), or None without one."""
    key = configured_key()
    return None if key is None else key.key_id


def canonical_bytes(doc: Mapping[str, Any]) -> bytes:
    """What a signature covers: ``doc`` without its ``signature`` key, as compact JSON with sorted
    keys (UTF-8, no spaces, no NaN). Equal documents give equal bytes however they were indented."""
    body = {k: v for k, v in doc.items() if k != SIGNATURE_FIELD}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def mac(doc: Mapping[str, Any], key: SigningKey) -> str:
    """The HMAC-SHA256 of ``doc``'s canonical bytes with ``key``, as 64 lower-case hex digits."""
    return hmac.new(key.secret, canonical_bytes(doc), hashlib.sha256).hexdigest()


def sign_document(doc: Mapping[str, Any], key: SigningKey) -> dict[str, str]:
    """The ``signature`` object for ``doc`` (any existing signature in it is ignored)."""
    return {"algorithm": SIGNATURE_ALGORITHM, "key_id": key.key_id, "hmac": mac(doc, key)}


def signature_key_id(doc: Mapping[str, Any]) -> str | None:
    """The key id a document claims to be signed with, or None when it carries no readable signature."""
    sig = doc.get(SIGNATURE_FIELD)
    if isinstance(sig, dict) and isinstance(sig.get("key_id"), str):
        return str(sig["key_id"])
    return None


# ------------------------------------------------------------------ signed archives
def sign_manifest(manifest: Manifest, key: SigningKey) -> Manifest:
    """``manifest`` with its ``signature`` set: HMAC-SHA256 of its JSON without the signature."""
    unsigned = replace(manifest, signature=None)
    return replace(manifest, signature=sign_document(unsigned.to_json(), key))
