"""Archive directories on disk, as tests look at and damage them: every file's SHA-256, the graph and
manifest files, a private copy, one byte inverted, a file cut short, and a JSON file edited and sealed
again (as if SAVE had written the edited content: to reach the checks behind the seal).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundry.format import load_sealed
from foundry.format.jsonfields import seal


def archive_files(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``root`` (empty when it does not exist)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def graph_files(root: Path) -> list[str]:
    """The graph and manifest files (.json, .cugraph) under ``root``."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".json", ".cugraph"))


def copy_archive(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip_byte(path: Path, offset: int) -> None:
    """Inverts one byte of a file (negative offsets count from the end)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def load_doc(path: Path) -> dict[str, Any]:
    """The document of a sealed archive JSON file (its seal checked and removed)."""
    doc: dict[str, Any] = load_sealed(path.read_bytes(), str(path))
    return doc


def write_doc(path: Path, doc: dict[str, Any]) -> None:
    """Writes ``doc`` sealed, as SAVE writes archive JSON files."""
    path.write_bytes(seal(doc))


def edit_doc(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Edits a sealed archive JSON file and seals it again."""
    doc = load_doc(path)
    edit(doc)
    write_doc(path, doc)
