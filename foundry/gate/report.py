"""What ``foundry verify`` reports: one ``Problem`` per defect, tagged with the check that found it, and
the ``Report`` that gathers them with how each check went."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from foundry.errors import (
    ArchiveCorruptError,
    ArchiveError,
    ArchiveForeignError,
    ArchiveSignatureError,
    ArchiveVersionError,
    IdentityMismatchError,
)

__all__ = ["Check", "CheckResult", "Problem", "ProblemKind", "Report"]


class Check(str, Enum):
    """The checks of ``foundry verify``, in the order they run (docs/TRUST.md)."""

    FILES = "files"
    """Every file readable, in a known format version, and matching the checksum recorded for it."""
    FOREIGN = "foreign"
    """No file in the archive directory that the manifest and its graphs do not account for."""
    KERNELS = "kernels"
    """Every kernel a graph launches is in a stored image of the declared size and format."""
    VARIABLES = "variables"
    """Every module variable a graph carries is one its image defines, of the size the image gives, and
    the graphs checked agree on each image's variables (each graph against its manifest: ``files``)."""
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


@dataclass(frozen=True)
class CheckResult:
    """How one check went: ``status`` is ``"passed"``, ``"failed"`` (``problems`` > 0) or
    ``"skipped"`` (``reason`` says why)."""

    check: Check
    status: str
    problems: int
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check.value, "status": self.status, "problems": self.problems, "reason": self.reason}


@dataclass(frozen=True)
class Report:
    """The outcome of ``verify_archive``. ``target`` is the path checked, ``mode`` ``"archive"`` (a
    directory) or ``"graph"`` (graph JSONs); ``graphs`` counts the graphs checked (those the manifest lists, or
    those named, without the templates read for them), ``images`` the images read. ``problems``
    lists the first few of each check and file, and one problem more for each that had more, saying how
    many (the report stays bounded, whatever the archive claims); ``checks`` count every one found."""

    target: str
    mode: str
    checks: tuple[CheckResult, ...]
    problems: tuple[Problem, ...]
    notes: tuple[str, ...]
    graphs: int
    images: int

    @property
    def ok(self) -> bool:
        """True when no check found a problem (skipped checks do not count against it)."""
        return not self.problems

    def problems_of(self, check: Check) -> list[Problem]:
        return [p for p in self.problems if p.check == check]

    @property
    def verdict(self) -> str:
        """One line: what passed, or how many problems which checks found."""
        skipped = [c.check.value for c in self.checks if c.status == "skipped"]
        tail = f"; skipped: {', '.join(skipped)}" if skipped else ""
        if self.ok:
            passed = sum(c.status == "passed" for c in self.checks)
            return f"OK: {self.target} passed {passed} checks{tail}"
        failed = [f"{c.check.value} ({c.problems})" for c in self.checks if c.status == "failed"]
        count = sum(c.problems for c in self.checks)
        return f"FAILED: {count} problem{'s' if count != 1 else ''} in {self.target}: {', '.join(failed)}{tail}"

    def error(self) -> ArchiveError | None:
        """The first problem as the exception LOAD raises for its kind (``ArchiveVersionError``,
        ``ArchiveForeignError``, ``ArchiveSignatureError``, ``IdentityMismatchError``, else
        ``ArchiveCorruptError``), saying how many more there are; None when there is none."""
        if not self.problems:
            return None
        first = self.problems[0]
        more = sum(c.problems for c in self.checks) - 1
        tail = f" ({more} more: run `foundry verify` on it for the full report)" if more else ""
        return _ERRORS.get(first.kind, ArchiveCorruptError)(f"{first.message}{tail}")  # names its file: LOAD's words

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "mode": self.mode,
            "ok": self.ok,
            "verdict": self.verdict,
            "graphs": self.graphs,
            "images": self.images,
            "checks": [c.to_json() for c in self.checks],
            "problems": [p.to_json() for p in self.problems],
            "notes": list(self.notes),
        }


_ERRORS: dict[ProblemKind, type[ArchiveError]] = {
    ProblemKind.VERSION: ArchiveVersionError,
    ProblemKind.FOREIGN: ArchiveForeignError,
    ProblemKind.SIGNATURE: ArchiveSignatureError,
    ProblemKind.IDENTITY: IdentityMismatchError,
}
