"""What the checks of ``foundry verify`` share: the findings so far, and the graphs read so far."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from foundry.errors import ArchiveError, ArchiveSignatureError, IdentityMismatchError
from foundry.images import ImageFormat, KernelParams, ModuleVariables
from foundry.records import Delta, GraphRecord
from foundry.schema import FunctionRef, GraphEntry, GraphMeta

from .report import Check, Problem, ProblemKind

__all__ = ["Findings", "GraphUnderCheck", "ImageInfo", "check_of", "kind_of"]


def kind_of(exc: ArchiveError) -> ProblemKind:
    """The problem kind of a rule's refusal: what its error says (``ArchiveError.kind``)."""
    return ProblemKind(exc.kind)


def check_of(exc: ArchiveError, check: Check) -> Check:
    """The check a refusal counts for: ``check``, the step that met it, but for a signature or identity refusal,
    which counts for that check whatever step met it."""
    if isinstance(exc, ArchiveSignatureError):
        return Check.SIGNATURE
    if isinstance(exc, IdentityMismatchError):
        return Check.IDENTITY
    return check


MAX_PER_FILE = 20
"""Problems listed per check and file; more are counted, and summarised in one problem."""
MAX_LISTED = 1000
"""Problems listed in all (a damaged archive can claim millions of kernels); more are counted alike."""
MAX_NOTES = 100
"""Notes listed; more are counted in one last note."""


@dataclass
class Findings:
    """Problems in the order found, notes (facts worth telling that are not problems), and the checks
    that could not run with the reason why. The report stays bounded whatever an archive claims: past
    ``MAX_PER_FILE`` problems of one check in one file, or ``MAX_LISTED`` in all, a problem is only counted
    (``counts``), and ``summaries`` says how many were left out: for each check and file that has problems
    listed, and for each check once for the files that have none listed (so the summaries are bounded too,
    however many files a check finds wanting); past ``MAX_NOTES`` notes, one note says how many more."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[Check, str] = field(default_factory=dict)
    counts: dict[Check, int] = field(default_factory=dict)
    _per_file: dict[tuple[Check, str], int] = field(default_factory=dict)
    _left_out: dict[tuple[Check, str], tuple[ProblemKind, int]] = field(default_factory=dict)
    # By check: the first file left out with none of its problems listed, the first one's kind, how many.
    _beyond: dict[Check, tuple[str, ProblemKind, int]] = field(default_factory=dict)
    _notes_left_out: int = 0

    def add(
        self,
        check: Check,
        kind: ProblemKind,
        path: str | Path,
        message: str,
        details: tuple[tuple[str, Any], ...] = (),
        named: bool = False,
    ) -> None:
        """A problem: a rule's refusal as LOAD raises it (``refuse``), or one a rule beyond LOAD's found, whose
        message is then made to name its file first (unless ``named``), as LOAD's refusals do, so that LOAD's
        eager run raises every problem as it is listed."""
        where = (check, str(path))
        listed = self._per_file.get(where, 0)
        self.counts[check] = self.counts.get(check, 0) + 1
        if listed >= MAX_PER_FILE or len(self.problems) >= MAX_LISTED:
            if listed:
                first_kind, more = self._left_out.get(where, (kind, 0))
                self._left_out[where] = (first_kind, more + 1)
            else:
                first_path, first_kind, more = self._beyond.get(check, (where[1], kind, 0))
                self._beyond[check] = (first_path, first_kind, more + 1)
            return
        self._per_file[where] = listed + 1
        if not named and not message.startswith(f"{where[1]}:"):
            message = f"{where[1]}: {message}"
        self.problems.append(Problem(where[1], kind, message, check, details))

    def refuse(
        self, check: Check, path: str | Path, exc: ArchiveError, details: tuple[tuple[str, Any], ...] = ()
    ) -> None:
        """A rule's refusal as LOAD raises it: its very message, its kind, and the check it counts for."""
        self.add(check_of(exc, check), kind_of(exc), path, str(exc), details, named=True)

    def summaries(self) -> list[Problem]:
        """One problem per check and file that had problems left out, saying how many, and one per check for
        the problems of files that had none listed."""
        out = [
            Problem(
                path,
                kind,
                f"{path}: {more} more {check.value} problem{'s' if more != 1 else ''} in this file, not listed (the "
                f"first {self._per_file.get((check, path), 0)} are): the report stays short; fix those and run verify "
                "again",
                check,
                (("more", more),),
            )
            for (check, path), (kind, more) in self._left_out.items()
        ]
        for check, (path, kind, more) in self._beyond.items():
            out.append(
                Problem(
                    path,
                    kind,
                    f"{path}: {more} more {check.value} problem{'s' if more != 1 else ''} in this and other files, not "
                    f"listed (the report lists {MAX_LISTED} problems at most): fix those listed and run verify again",
                    check,
                    (("more", more),),
                )
            )
        return out

    def note(self, text: str) -> None:
        if text in self.notes:
            return
        if len(self.notes) >= MAX_NOTES:
            self._notes_left_out += 1
            return
        self.notes.append(text)

    def all_notes(self) -> list[str]:
        """The notes, and how many were left out."""
        if not self._notes_left_out:
            return list(self.notes)
        return [*self.notes, f"{self._notes_left_out} more note(s), not listed: the report stays short"]

    def skip(self, check: Check, reason: str) -> None:
        self.skipped.setdefault(check, reason)


@dataclass(frozen=True)
class ImageInfo:
    """A stored image as found: ``sound`` when it exists with the recorded size and SHA-256; its
    format as read from its bytes (None: not a format the driver takes); the kernels and the module
    variables it defines (None when unread), and the parameters of the kernels its ELF code describes."""

    sha256: str
    path: Path
    sound: bool
    detected: ImageFormat | None = None
    names: frozenset[str] | None = None
    names_complete: bool = False
    variables: ModuleVariables | None = None
    params: Mapping[str, KernelParams | None] = field(default_factory=dict)


@dataclass(eq=False)
class GraphUnderCheck:
    """One graph read from disk. ``record`` is its own graph record, or None for a template member,
    which has a ``delta`` instead; once the member's template is found and its delta checked,
    ``template`` and ``applied`` (the template's record with the member's overrides) are set."""

    json_path: Path
    label: str
    meta: GraphMeta
    json_sha256: str  # of the JSON bytes ``meta`` was parsed from
    record: GraphRecord | None = None
    delta: Delta | None = None
    entry: GraphEntry | None = None
    template: GraphUnderCheck | None = None
    applied: GraphRecord | None = None

    @cached_property
    def overridden(self) -> frozenset[int]:
        """Top-level node indices a member's delta overrides (empty for a graph with its own record)."""
        return frozenset() if self.delta is None else frozenset(index for index, _ in self.delta.overrides)

    @property
    def effective(self) -> GraphRecord | None:
        """The graph LOAD would build: its record, or its template's with its overrides applied."""
        return self.record if self.delta is None else self.applied

    def functions_at(self, path: tuple[int, ...]) -> tuple[FunctionRef, ...]:
        """The function table that the kernel node at ``path`` of ``effective`` indexes: a member's
        own for the nodes it overrides, its template's for the others."""
        if self.template is not None and path[0] not in self.overridden:
            return self.template.meta.functions
        return self.meta.functions
