"""Keys and signing: the signing key in force for the process, and manifest signatures (HMAC-SHA256,
docs/TRUST.md). What a signature proves, and everything else about whether an archive is acceptable, is
foundry.gate's. The archive format packages (foundry.records ... foundry.archive) stay bytes only.
"""

from __future__ import annotations

from .signing import (
    KEY_ENV,
    SIGNATURE_ALGORITHM,
    SIGNATURE_FIELD,
    KeySource,
    SigningKey,
    as_key,
    configured_key,
    mac,
    set_signing_key,
    sign_manifest,
    signature_key_id,
    signing_key_id,
)

__all__ = [
    "KEY_ENV",
    "SIGNATURE_ALGORITHM",
    "SIGNATURE_FIELD",
    "KeySource",
    "SigningKey",
    "as_key",
    "configured_key",
    "mac",
    "set_signing_key",
    "sign_manifest",
    "signature_key_id",
    "signing_key_id",
]
