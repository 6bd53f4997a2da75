"""Where a rank's archive (and its start-up report) lies when an engine runs on several GPUs, and which
layouts SAVE and LOAD accept.

One process per GPU (a rank) saves and loads its own graphs: with a world of one the archive is the
directory the user named, with more each rank's is ``rank_<r>`` in it, as ``foundry.set_rank`` declares
the rank to Foundry (which records it in every graph and refuses another at LOAD). Every rank reads the same
listing of that directory before the GPU is touched, so an archive saved by another number of ranks is
refused on every rank alike, before any communicator exists that a rank could wait in.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from .engine import Engine
from .errors import ArchiveMismatchError, PluginConfigError, UnsupportedConfigError

__all__ = [
    "NCCL_SETTINGS",
    "SINGLE",
    "Place",
    "bundles_to_store",
    "check_load_dir",
    "check_save_dir",
    "first_rank_dir",
    "nccl_settings",
    "rank_dir",
    "report_path",
    "share_with_other_ranks",
]

# What every rank's process runs with, SAVE and LOAD alike, set before the first communicator exists (where the
# user set none; a user's other value is refused by name):
#   NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1: NVLink multicast objects
#     are made by the driver at addresses no other process can be given; nothing restores them.
#   NCCL_RUNTIME_CONNECT=0: NCCL connects every channel and protocol when the communicator is made, instead
#     of at the first collective of each: the engine's profiling and warm-up collectives, which LOAD skips,
#     would otherwise map the peers' buffers at SAVE only, and LOAD would find them missing.
#   NCCL_GRAPH_REGISTER=0: NCCL would map the peers' own buffers while the graph is captured, which LOAD
#     never does.
#   NCCL_CUMEM_ENABLE=1: the peers' buffers come as cuMem handles, mapped in the region; without it they are
#     CUDA IPC mappings at addresses the driver picks, which SAVE refuses.
NCCL_SETTINGS = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "NCCL_RUNTIME_CONNECT": "0",
    "NCCL_GRAPH_REGISTER": "0",
    "NCCL_CUMEM_ENABLE": "1",
}

_RANK_DIR = re.compile(r"rank_(0|[1-9][0-9]{0,5})")
_ADDRESSED = re.compile(r"[0-9a-f]{64}\.bin")  # a content-addressed file: named by its bytes' SHA-256


@dataclass(frozen=True)
class Place:
    """A process's rank among ``world`` processes of one deployment (tensor parallel: one per GPU)."""

    rank: int
    world: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} of a world of {self.world}: need 0 <= rank < world")


SINGLE = Place(0, 1)


def nccl_settings(place: Place, engine: Engine, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Sets NCCL_SETTINGS in the environment of a rank of a world larger than one (where unset), and returns
    those it set. Refuses, naming each, a variable the user set to another value."""
    if place.world == 1:
        return {}
    env = os.environ if environ is None else environ
    wrong = [f"{k}={env[k]} (needs {v})" for k, v in NCCL_SETTINGS.items() if env.get(k, v).strip() != v]
    if wrong:
        raise UnsupportedConfigError(
            f"{engine.name} on {place.world} GPUs under Foundry runs every rank with "
            + ", ".join(f"{k}={v}" for k, v in NCCL_SETTINGS.items())
            + f', and this environment sets {"; ".join(wrong)}: unset them (docs/DESIGN.md, "Many GPUs", says why '
            f"each is needed), or start with {engine.var('MODE')}=off"
        )
    added = {k: v for k, v in NCCL_SETTINGS.items() if k not in env}
    env.update(added)
    return added


def rank_dir(archive: Path, place: Place) -> Path:
    """The directory this rank's graphs, metadata and manifest are in."""
    return archive if place.world == 1 else archive / f"rank_{place.rank}"


def report_path(report: Path, place: Place) -> Path:
    """Where this rank writes the report FOUNDRY_<E>_REPORT names: that file for a world of one and for rank 0,
    ``<stem>.rank<r><suffix>`` beside it for the other ranks (report-load.json: report-load.rank1.json)."""
    if place.world == 1 or place.rank == 0:
        return report
    return report.with_name(f"{report.stem}.rank{place.rank}{report.suffix}")


def first_rank_dir(archive: Path) -> Path:
    """The folder of the archive's lowest rank: the archive itself where one process saved it. For what every
    rank's folder holds alike, read before this process knows its rank."""
    ranks = _ranks_in(archive)
    return rank_dir(archive, Place(min(ranks), max(ranks) + 1)) if ranks else archive


def _ranks_in(archive: Path) -> set[int]:
    if not archive.is_dir():
        return set()
    return {int(m.group(1)) for p in archive.iterdir() if p.is_dir() and (m := _RANK_DIR.fullmatch(p.name))}


def check_save_dir(archive: Path, place: Place, engine: Engine) -> Path:
    """SAVE: this rank's directory, created; refuses one that holds anything, and a deployment directory
    that holds anything but the ranks of this world (an earlier SAVE's files would be mixed with these)."""
    own = rank_dir(archive, place)
    if place.world > 1 and archive.exists():
        if not archive.is_dir():
            raise PluginConfigError(f"{archive} is not a directory: point {engine.var('ARCHIVE')} at a new directory")
        wanted = {f"rank_{r}" for r in range(place.world)}
        stray = sorted(p.name for p in archive.iterdir() if p.name not in wanted)
        if stray:
            raise PluginConfigError(
                f"SAVE writes a fresh archive of {place.world} ranks (rank_0 .. rank_{place.world - 1}) in {archive}, "
                f"which also holds {', '.join(stray[:5])}{' ...' if len(stray) > 5 else ''}: remove them or point "
                f"{engine.var('ARCHIVE')} at a new directory"
            )
    if own.exists() and (not own.is_dir() or any(own.iterdir())):
        raise PluginConfigError(
            f"SAVE writes a fresh archive, and {own} already exists and is not empty: remove it or point "
            f"{engine.var('ARCHIVE')} at a new directory"
        )
    own.mkdir(parents=True, exist_ok=True)
    return own


def check_load_dir(archive: Path, place: Place, engine: Engine) -> Path:
    """LOAD: this rank's directory, once the archive's ranks are exactly this world's (every rank reads the
    same listing, so all refuse alike)."""
    ranks = _ranks_in(archive)
    saved = f"saved by {len(ranks)} ranks (rank_* folders {sorted(ranks)})" if ranks else "saved by one process"
    here = f"this {engine.name} runs {place.world} rank{'s' if place.world > 1 else ''}"
    if place.world == 1 and ranks:
        raise ArchiveMismatchError(
            f"the archive {archive} was {saved}, and {here}: start {engine.name} with the same tensor-parallel "
            "size as SAVE, or SAVE again"
        )
    if place.world > 1 and ranks != set(range(place.world)):
        raise ArchiveMismatchError(
            f"the archive {archive} was {saved}, and {here} (rank_0 .. rank_{place.world - 1}): start "
            f"{engine.name} with the same tensor-parallel size as SAVE, or SAVE again"
        )
    return rank_dir(archive, place)


def share_with_other_ranks(archive: Path, place: Place) -> int:
    """After this rank's SAVE: each content-addressed file of its archive (kernel images, state memory, cached
    files: ``<sha256>.bin``) that another rank's folder holds at the same place with the same bytes becomes a hard
    link to that one, so that a deployment's ranks keep one copy of what they share (the ranks run the same
    kernels). Returns the bytes now shared.

    The format is unchanged: every rank's folder still holds all it needs, and LOAD reads and checks it as
    before. The other file must hash to its name, so a damaged copy is never spread; each replacement is one
    atomic rename, so ranks finishing at once leave either copy, whole. Where the file system makes no hard
    links, the copies stay. ``tar`` and ``rsync -H`` keep the links when the deployment is shipped; ``cp -r``
    does not (the copies are then whole again, and as valid)."""
    if place.world == 1:
        return 0
    shared = 0
    others = [archive.parent / f"rank_{r}" for r in range(place.world) if r != place.rank]
    for path in sorted(archive.rglob("*.bin")):
        if not _ADDRESSED.fullmatch(path.name) or path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(archive)
        mine = path.stat()
        for other in (o / rel for o in others):
            try:
                theirs = other.stat()
            except OSError:
                continue
            if (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino):
                shared += mine.st_size
                break
            if theirs.st_size != mine.st_size or theirs.st_dev != mine.st_dev or not _holds_its_name(other):
                continue
            temp = path.with_name(f".{path.name}.link-{os.getpid()}")
            try:
                os.link(other, temp)
                os.replace(temp, path)
            except OSError:
                temp.unlink(missing_ok=True)
                continue
            shared += mine.st_size
            break
    return shared


def _holds_its_name(path: Path) -> bool:
    """Whether a content-addressed file's bytes hash to its name."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    except OSError:
        return False
    return digest.hexdigest() == path.name.removesuffix(".bin")


_FINISHED = "graph_manifest.json"  # SAVE's commit point: a rank folder holding it is finished (docs/FORMAT.md)


def bundles_to_store(archive: Path, place: Place) -> list[tuple[Path, Path]]:
    """After this rank's SAVE: the (rank folder, base) pairs whose graph bundle to store against rank 0's
    (``foundry.store_bundle_against``): a rank above 0 its own, once rank 0 has finished; rank 0 every other rank's
    that finished before it. Whatever order the ranks finish in, every bundle but rank 0's is stored so once the
    last one finishes: a rank that finds rank 0 unfinished wrote its manifest before rank 0 wrote its own, so rank 0
    finds it finished."""
    if place.world == 1:
        return []
    top = archive.parent
    base = top / "rank_0"
    if not (base / _FINISHED).is_file():
        return []
    if place.rank:
        return [(archive, base)]
    others = (top / f"rank_{r}" for r in range(1, place.world))
    return [(other, base) for other in others if (other / _FINISHED).is_file()]
