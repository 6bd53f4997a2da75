"""The signature rule (docs/TRUST.md, docs/FORMAT.md "Signature"): under a key, a manifest is accepted only when
it is signed with that key and unchanged since. The key and the HMAC are foundry.trust's; this decides."""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from typing import Any

from foundry.errors import ArchiveSignatureError
from foundry.schema.jsonfields import is_sha256
from foundry.trust import SIGNATURE_ALGORITHM, SIGNATURE_FIELD, SigningKey, mac

__all__ = ["check_signature"]


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
    if not hmac.compare_digest(str(sig["hmac"]), mac(doc, key)):
        raise ArchiveSignatureError(
            f"{source}: the signature does not match the content: the manifest was changed after it was signed "
            f"with key {key.key_id}. Do not load this archive; save it again from a trusted source."
        )
