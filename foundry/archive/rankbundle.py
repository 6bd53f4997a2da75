"""After a deployment's ranks have saved: one rank's graph bundle stored against another's (bundle_delta.py), so
that the deployment keeps one copy of the graph records its ranks hold alike.

Only finished archives are touched (each has its manifest, SAVE's commit point), and only the bundle file,
replaced atomically by a file that rebuilds the same bytes: the manifest, which states the bundle's size and
every graph's hash, is unchanged, and a reader at any moment finds either form, each whole. The base stays
laid out in full; a rank stored against one is never a base itself.
"""

from __future__ import annotations

from pathlib import Path

from foundry.errors import ArchiveError
from foundry.storage import PathLike, read_regular, write_atomic

from .bundle import BUNDLE_NAME
from .bundle_delta import HEAD_BYTES, base_of, is_delta, pack_delta, rebuild, sibling_rank
from .manifest import read_manifest

__all__ = ["store_bundle_against", "stored_against"]


def _full_bundle(directory: Path) -> tuple[Path, bytearray] | None:
    """The finished archive's bundle, laid out in full, or None (no manifest yet, no bundle, or stored otherwise)."""
    try:
        ref = read_manifest(directory).bundle
    except (ArchiveError, OSError):
        return None
    if ref is None:
        return None
    path = directory / BUNDLE_NAME
    try:
        if path.stat().st_size != ref.bytes:
            return None
        return path, read_regular(path, "graph bundle", size=ref.bytes)
    except (ArchiveError, OSError):
        return None


def store_bundle_against(archive_dir: PathLike, base_dir: PathLike) -> int:
    """Stores the graph bundle of ``archive_dir`` (a rank folder, ``rank_<r>``, whose SAVE finished) against the
    bundle of ``base_dir`` (another rank folder of the same deployment, ``rank_<k>``), where that saves at least
    half of it. Returns the bytes saved, 0 where nothing was changed: either archive unfinished or without a
    bundle, the bundle already stored so, or too little in common. LOAD, ``foundry verify`` and ``inspect`` read
    the rebuilt bundle and check it as before; the rank folder then needs its base beside it (ship the deployment
    folder whole). ``ValueError`` for folders that are not two rank folders of one deployment."""
    here, base = Path(archive_dir).resolve(), Path(base_dir).resolve()
    rank, base_rank = sibling_rank(here), sibling_rank(base)
    if rank is None or base_rank is None or rank == base_rank or here.parent != base.parent:
        raise ValueError(
            f"store_bundle_against({archive_dir}, {base_dir}): need two rank folders (rank_<r>, rank_<k>, r != k) "
            "of one deployment folder"
        )
    mine, theirs = _full_bundle(here), _full_bundle(base)
    if mine is None or theirs is None:
        return 0
    path, data = mine
    delta = pack_delta(data, theirs[1], base_rank)
    if len(delta) * 2 > len(data):
        return 0
    if rebuild(delta, theirs[1], len(data), str(path), str(theirs[0])) != data:  # never replace what cannot come back
        return 0
    write_atomic(path, delta)
    return len(data) - len(delta)


def stored_against(archive_dir: PathLike) -> tuple[int, int] | None:
    """(base rank, the file's bytes on disk) where the archive's graph bundle is stored against another rank's,
    else None (stored in full, or none): for a reader's listing; LOAD's readers check it (bundle.py)."""
    file = Path(archive_dir) / BUNDLE_NAME
    try:
        with file.open("rb") as f:
            head = f.read(HEAD_BYTES)
        on_disk = file.stat().st_size
    except OSError:
        return None
    return (base_of(head, str(file))[0], on_disk) if len(head) == HEAD_BYTES and is_delta(head) else None
