"""The identity rule: an archive is accepted on a machine like the one it was saved on (docs/FORMAT.md,
"identity"), but for the fields the caller accepts knowingly. LOAD applies it to each graph it builds, with
this machine's identity (foundry.native); ``foundry verify`` to the manifest and every graph, with the identity
it is given."""

from __future__ import annotations

from collections.abc import Iterable

from foundry.errors import IdentityMismatchError
from foundry.schema import Identity, compare

__all__ = ["check_identity", "identity_details"]


def check_identity(what: str, saved: Identity, current: Identity, allow: Iterable[str] = ()) -> None:
    """Refuses ``what`` (a graph, named as LOAD names it, or the manifest) saved with ``saved`` on a machine of
    ``current``: every field that differs, with its consequence, and how to accept it."""
    mismatches = compare(saved, current, frozenset(allow))
    if mismatches:
        lines = "\n  ".join(m.message for m in mismatches)
        fields = ", ".join(repr(m.field) for m in mismatches)
        raise IdentityMismatchError(
            f"{what} was saved on a different machine:\n  {lines}\nRe-run SAVE on this machine, or pass "
            f"allow_mismatch={{{fields}}} if you accept the consequence."
        )


def identity_details(saved: Identity, current: Identity) -> tuple[tuple[str, object], ...]:
    """The fields that differ as facts for ``foundry verify --json``: each field with both values."""
    differences = [{"field": m.field, "saved": m.saved, "current": m.current} for m in compare(saved, current)]
    return (("differences", differences),)
