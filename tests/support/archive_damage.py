"""Archive directories on disk, as tests look at and damage them: every file's SHA-256, the graph and
manifest files, a private copy, one byte inverted, a file cut short.

(Also re-exported by tests/support/graphs.py, where they used to live.)
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


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
