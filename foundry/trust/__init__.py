"""Where trust in an archive is decided: the signing key in force, manifest signatures (HMAC-SHA256,
docs/TRUST.md), and the proof that a graph, or a document, is the one its archive's signed (or sealed)
manifest lists. It holds what that decision keeps for the process: the configured key, the manifests already
proven, and the batch of graphs a LOAD reads against one reading of each manifest. foundry.format stays bytes
only.
"""

from __future__ import annotations

from .caches import open_engine_caches, signing_key_id
from .documents import read_archive_document
from .signing import (
    KEY_ENV,
    KeySource,
    SigningKey,
    archive_manifest,
    as_key,
    authenticate_graph,
    authenticate_manifest,
    check_signature,
    configured_key,
    manifest_disagreement,
    manifests_read_once,
    set_signing_key,
    sign_manifest,
    signature_key_id,
)

__all__ = [
    "KEY_ENV",
    "KeySource",
    "SigningKey",
    "archive_manifest",
    "as_key",
    "authenticate_graph",
    "authenticate_manifest",
    "check_signature",
    "configured_key",
    "manifest_disagreement",
    "manifests_read_once",
    "open_engine_caches",
    "read_archive_document",
    "set_signing_key",
    "sign_manifest",
    "signature_key_id",
    "signing_key_id",
]
