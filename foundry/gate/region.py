"""The region an archive names, as part of the ``files`` check: ``region.json`` by the rule LOAD applies
(foundry.archive.archive_region), and the manifest's region against its graphs'.

SAVE writes the manifest's region after every graph it lists, from the same allocation log: the log
only grows and the high-water mark only rises, so the manifest's ``high_water`` is at least each graph's,
and its ``events`` (the full log) hold every allocation a graph lists. The one exception is a manifest
written after the region was released, which keeps the last graph's region as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from foundry.archive import Manifest, archive_region
from foundry.errors import ArchiveError
from foundry.storage import REGION_HINT
from foundry.tables import plural

from .findings import Findings, GraphUnderCheck
from .report import Check, ProblemKind

__all__ = ["check_manifest_region", "check_region_hint"]

MAX_MISSING_SHOWN = 3


def check_region_hint(directory: Path, manifest: Manifest | None, found: Findings) -> None:
    """``region.json`` of ``directory``, sound and naming the manifest's region (when there is one)."""
    try:
        archive_region(directory, manifest)
    except ArchiveError as exc:
        found.refuse(Check.FILES, directory / REGION_HINT, exc)


def check_manifest_region(
    manifest: Manifest, manifest_path: Path, graphs: Sequence[GraphUnderCheck], found: Findings
) -> None:
    """The manifest's high-water mark and allocation log against those of ``graphs`` (of its archive)."""
    ours = manifest.region
    if any(g.meta.region == ours for g in graphs):
        return  # written after the region was released: a graph's region as it is
    logged = set(ours.events)
    for graph in graphs:
        theirs = graph.meta.region
        if theirs.high_water > ours.high_water:
            found.add(
                Check.FILES,
                ProblemKind.MISMATCH,
                manifest_path,
                f"the manifest's region was used up to offset {ours.high_water:#x}, but {graph.label} was saved "
                f"with it used up to {theirs.high_water:#x}; the mark only rises, so the two come from different "
                "saves, or one was edited. Save the archive again.",
            )
        missing = [e for e in theirs.events if e not in logged]
        if missing:
            shown = ", ".join(f"seq {e[0]} at offset {e[2]:#x}" for e in missing[:MAX_MISSING_SHOWN])
            more = f" and {len(missing) - MAX_MISSING_SHOWN} more" if len(missing) > MAX_MISSING_SHOWN else ""
            found.add(
                Check.FILES,
                ProblemKind.MISMATCH,
                manifest_path,
                f"{graph.label} lists {plural(len(missing), 'allocation')} that the manifest's allocation log does "
                f"not hold ({shown}{more}); the log holds every allocation SAVE made, so the two come from different "
                "saves, or one was edited. Save the archive again.",
            )
