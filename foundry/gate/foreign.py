"""The ``foreign`` check of ``foundry verify``: nothing in the archive directory but the archive.

An archive is code that LOAD runs, so a file in it that the manifest and its graphs do not account for
is reported: graph files saved after the manifest (or by another process), temporary files of an
interrupted write, and anything else. Images and state memory snapshots that no graph uses (left by a
later save over the same archive) are only noted: LOAD never reads them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from foundry.archive import BUNDLE_NAME, MANIFEST_NAME, Manifest, container_path, resolve_archive_dir
from foundry.schema import IMAGES_DIR
from foundry.schema.jsonfields import is_sha256
from foundry.storage import MEMORY_DIR, REGION_HINT, TEMP_SUFFIX, image_path, memory_path

from .findings import Findings, GraphUnderCheck
from .report import Check, ProblemKind

__all__ = ["check_foreign", "known_files"]


def known_files(directory: Path, manifest: Manifest, graphs: Iterable[GraphUnderCheck]) -> set[Path]:
    """Resolved paths of every file the manifest or a graph read refers to."""
    known = {directory / MANIFEST_NAME, directory / REGION_HINT}
    if manifest.bundle is not None:
        known.add(directory / BUNDLE_NAME)
    if manifest.stale_bundle is not None:  # an earlier Foundry's copy of the graph files: noted by the files check
        known.add(directory / manifest.stale_bundle)
    # A bundled graph's name too: a file there is reported with the graph (the files check), which LOAD refuses.
    known.update(directory / e.json for e in manifest.graphs)
    known.update(directory / d.file for d in manifest.documents)
    known.update(image_path(directory, e.sha256) for e in manifest.images)
    known.update(memory_path(directory, v.sha256) for e in manifest.images for v in e.variables or ())
    for graph in graphs:
        meta = graph.meta
        known.add(graph.json_path)
        if meta.record is not None:
            known.add(graph.json_path.parent / meta.record.file)
        images_at = resolve_archive_dir(graph.json_path, meta)
        known.update(image_path(images_at, ref.sha256) for ref in meta.images)
        known.update(memory_path(images_at, v.sha256) for ref in meta.images for v in ref.variables or ())
        if meta.memory is not None:
            known.add(memory_path(images_at, meta.memory.sha256))
    for e in manifest.graphs:  # a graph JSON that could not be read still owns its .cugraph
        known.add(container_path(directory / e.json))
    return {p.resolve() for p in known}


def _why(path: Path, directory: Path) -> tuple[bool, str]:
    """(is it a problem, what it is). Content-addressed images and snapshots no graph uses are left
    behind by a later save over the same archive; LOAD never reads them, so they are only noted."""
    if path.name.endswith(TEMP_SUFFIX):
        return True, "a temporary file left by an interrupted write; remove it"
    if path.suffix in (".json", ".cugraph"):
        return True, (
            "a graph file or document the manifest does not list (saved after the manifest was written, by "
            "another process, or by an older Foundry that did not list documents): save the archive again, or "
            "remove it"
        )
    content_addressed = path.suffix == ".bin" and is_sha256(path.stem)
    if content_addressed and path.parent == directory / IMAGES_DIR:
        return False, "a kernel image no graph of the archive uses (left by an earlier save); LOAD ignores it"
    if content_addressed and path.parent == directory / MEMORY_DIR:
        return False, (
            "a state memory snapshot or module variable value no graph of the archive uses (left by an earlier "
            "save); LOAD ignores it"
        )
    return True, (
        "not part of the archive: nothing in the manifest or its graphs refers to it. Archives are code; keep "
        "nothing else in them"
    )


def check_foreign(directory: Path, known: set[Path], found: Findings) -> None:
    """Reports every file under ``directory`` (recursively) whose resolved path is not in ``known``;
    unused images and snapshots are noted instead (see ``_why``)."""
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if path.resolve() in known:
                continue
            problem, why = _why(path, directory)
            if problem:
                found.add(Check.FOREIGN, ProblemKind.FOREIGN, path, why)
            else:
                found.note(f"{path}: {why}")
