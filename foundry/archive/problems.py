"""What archive verification reports: one ``Problem`` per defect, tagged with the check that found it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["Check", "Problem", "ProblemKind"]


class Check(str, Enum):
    """The checks of ``foundry verify``, in the order they run (docs/TRUST.md)."""

    FILES = "files"
    """Every file readable, in a known format version, and matching the checksum recorded for it."""
    FOREIGN = "foreign"
    """No file in the archive directory that the manifest and its graphs do not account for."""
    KERNELS = "kernels"
    """Every kernel a graph launches is in a stored image of the declared size and format."""
    TEMPLATES = "templates"
    """Every template member is its template plus overrides of kernel, memset and memcpy nodes."""
    POINTERS = "pointers"
    """Every region address a graph uses lies in the memory LOAD maps (the region's live ranges)."""
    IDENTITY = "identity"
    """The archive was saved on a machine like this one."""
    SIGNATURE = "signature"
    """The manifest is signed with the given key and unchanged since."""


class ProblemKind(Enum):
    """What is wrong."""

    MISSING = "missing"
    """A file the archive names does not exist (or cannot be read)."""
    CHECKSUM = "checksum"
    """A file's content does not match the checksum recorded for it."""
    CORRUPT = "corrupt"
    """A file is malformed."""
    MISMATCH = "mismatch"
    """Two files are each well-formed but disagree (files of different saves)."""
    VERSION = "version"
    """A file is in a format version this Foundry does not read."""
    FOREIGN = "foreign"
    """A file is not a Foundry archive file at all, or does not belong to the archive."""
    POINTER = "pointer"
    """A graph uses an address of the region that LOAD does not map."""
    IDENTITY = "identity"
    """The archive was saved on a different GPU, driver or software stack."""
    SIGNATURE = "signature"
    """The archive is unsigned, signed with another key, or changed after signing."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One defect: the file it is in, its kind, a message saying what was found and what follows
    from it, the check that found it, and for pointer problems the facts as ``(name, value)`` pairs
    (graph, node, kernel, parameter, address)."""

    path: str
    kind: ProblemKind
    message: str
    check: Check = Check.FILES
    details: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.path}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "check": self.check.value,
            "kind": self.kind.value,
            "path": self.path,
            "message": self.message,
        }
        if self.details:
            doc["details"] = dict(self.details)
        return doc
