"""The path `foundry inspect` and `foundry verify` take: an archive directory, its manifest, or one
graph's .json (by its name, for a graph stored in its archive's graph bundle). Both commands refuse the same
paths with the same words and exit status."""

from __future__ import annotations

import stat
from pathlib import Path

from foundry.archive import MANIFEST_NAME, manifest_if_any
from foundry.errors import ArchiveError
from foundry.schema import GraphStorage
from foundry.storage import file_kind

__all__ = ["EXIT_CANNOT_START", "archive_target"]

EXIT_CANNOT_START = 2
"""Exit status of a command that could not start: no such path, nothing to check there."""


def archive_target(raw: str) -> Path:
    """The directory or graph JSON that ``raw`` names (a manifest stands for its archive directory).
    ``ValueError`` says why there is nothing to look at: no such path, neither a directory nor a regular file
    (a FIFO or a device, told by its type before anything is opened: it would never be an archive, and
    reading it could wait for ever), or a directory without a manifest."""
    path = Path(raw)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if not _bundled(path):  # a graph its archive stores in the bundle has no file of its own
            raise ValueError(f"{path} does not exist: give an archive directory or a graph's .json") from None
        return path
    except OSError as exc:
        raise ValueError(
            f"{path} cannot be read ({exc.strerror}): give an archive directory or a graph's .json"
        ) from None
    if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        raise ValueError(
            f"{path} is a {file_kind(mode)}, not an archive directory or a graph's .json: give one of those"
        )
    if path.name == MANIFEST_NAME and stat.S_ISREG(mode):
        path = path.parent
    if path.is_dir() and not (path / MANIFEST_NAME).is_file():
        raise ValueError(
            f"{path} has no {MANIFEST_NAME}: give an archive directory, a graph's .json, or save the manifest"
        )
    return path


def _bundled(path: Path) -> bool:
    """Whether the manifest beside ``path`` stores a graph of that name in its graph bundle: its name, though no
    file has it (docs/FORMAT.md, "Graph bundle"). An unreadable manifest says no here; the commands report it."""
    try:
        manifest = manifest_if_any(path.parent)
    except ArchiveError:
        return False
    return manifest is not None and any(
        e.json == path.name and e.stored == GraphStorage.BUNDLE for e in manifest.graphs
    )
