"""Files of an archive: crash-safe writes, paths kept inside the archive, SHA-256, and the content-addressed
store.

``write_atomic`` guarantees that if it raises (or the process dies) the file still holds its old
bytes, or does not exist if it did not before: the bytes go to a temporary file in the same
directory, which is renamed over the target. With ``durable`` (the default) the file is ``fsync``ed
before and the directory after the rename, so the new bytes survive a power loss once it returns.

SAVE writes graph files without ``durable`` and makes them durable all at once before the manifest,
its commit point: after a power loss a non-durable file can only be empty or short, which the
checksums that the manifest and each graph's JSON carry reveal, so LOAD refuses rather than misreads.

Content-addressed files (kernel images ``images/<sha256>.bin``, state memory ``memory/<sha256>.bin``)
are named by the SHA-256 of their bytes, so any number of graphs and saves share one; SAVE rewrites
such a file only when the file there is not those bytes (a damaged copy is repaired by saving again).

Reading: every file of an archive is read through ``read_regular`` (reads.py), and every path an archive
file names through ``inside`` first. A path named inside a file is relative to a root (the directory of the
file that names it, or the archive directory) and must stay in it: absolute paths, ``..`` and symlinks
whose target leaves the root are refused before anything is opened.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import secrets
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from foundry.errors import ArchiveCorruptError
from foundry.images import ImageFormat
from foundry.schema import CACHES_DIR, ImageRef, image_relpath
from foundry.schema.jsondocs import check_format, load_sealed, seal
from foundry.schema.jsonfields import At, field_int, relative_path_problem

from .reads import PathLike, read_regular, sha256_file

__all__ = [
    "MAX_HINT_BYTES",
    "MEMORY_DIR",
    "REGION_HINT",
    "TEMP_SUFFIX",
    "PathLike",
    "cache_blob_path",
    "image_path",
    "inside",
    "inside_name",
    "memory_path",
    "open_image",
    "read_memory",
    "read_region_hint",
    "read_stored",
    "read_value",
    "real_name",
    "real_path",
    "real_paths_memoized",
    "sha256_bytes",
    "sha256_holding",
    "write_addressed",
    "write_atomic",
    "write_atomic_parts",
    "write_image",
    "write_memory",
    "write_region_hint",
]

TEMP_SUFFIX = ".foundry-tmp"
"""Suffix of the temporary files ``write_atomic`` creates (and removes) next to its target."""
"""Where kernel images live in an archive (docs/FORMAT.md, "Kernel images")."""
MEMORY_DIR = "memory"
"""Where state memory snapshots live in an archive (docs/FORMAT.md, "State memory")."""
REGION_HINT = "region.json"
"""The region LOAD reserves before it loads images (docs/FORMAT.md, "Region hint")."""
REGION_HINT_VERSION = 2

MAX_HINT_BYTES = 1 << 16
"""Bound on reading ``region.json``."""


def write_atomic(path: PathLike, data: bytes | bytearray | memoryview, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically, and durably unless told not to (module docstring).

    The new file gets the usual permissions (0666 less the umask). The parent directory must exist.
    Errors are the ``OSError`` of the failing call; the temporary file is removed before it
    propagates, so an existing ``path`` is never damaged.
    """
    write_atomic_parts(path, (data,), durable)


def write_atomic_parts(path: PathLike, parts: Sequence[bytes | bytearray | memoryview], durable: bool = True) -> None:
    """``write_atomic`` of ``parts`` laid end to end, without joining them first (a graph container is
    a header and a record of up to hundreds of MiB; a bundle, every graph's files)."""
    target = Path(path)
    directory = target.parent
    fd, tmp = _create_temp(directory, target.name)
    try:
        with open(fd, "wb", closefd=True) as f:
            for part in parts:
                f.write(part)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(directory)


def _create_temp(directory: Path, name: str) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # platforms without directory handles: the rename is as durable as it gets
    try:
        os.fsync(dfd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(dfd)


_MEMO = threading.local()


@contextlib.contextmanager
def real_paths_memoized() -> Iterator[None]:
    """Within, on this thread, each path's real path (every symlink resolved) is worked out once. LOAD
    checks thousands of graph files of one archive at once (an engine's piecewise graphs), on the calling
    thread, where resolving the same directory again for each of them would cost more than the rest. Outside, every
    call resolves afresh: a link changed between two loads is seen."""
    outer = getattr(_MEMO, "paths", None)
    _MEMO.paths = {} if outer is None else outer
    try:
        yield
    finally:
        _MEMO.paths = outer


def real_path(path: PathLike) -> Path:
    """``os.path.realpath(path)`` as a Path, memoized inside ``real_paths_memoized``."""
    return Path(real_name(path))


def real_name(path: PathLike) -> str:
    """``real_path`` as a string: what LOAD compares and looks up (building a Path costs more than the rest)."""
    key = os.fspath(path)
    memo: dict[Any, Any] | None = getattr(_MEMO, "paths", None)
    if memo is None:
        return os.path.realpath(key)
    real: str | None = memo.get(key)
    if real is None:
        head, name = os.path.split(key)
        if head and name not in ("", ".", ".."):
            real = _entry(real_name(head), name, key, memo)
        else:
            memo[key] = real = os.path.realpath(key)
    return real


def _entry(base: str, name: str, path: str, memo: dict[Any, Any] | None) -> str:
    """The real path of ``path``, the entry ``name`` (one component) of the directory whose real path is
    ``base``, kept in ``memo`` under ``path``: ``base/name`` when it is no symbolic link (what
    ``os.path.realpath`` says, which takes a name it cannot ``lstat`` as no link), else the link resolved. One
    lstat, the directory's own resolution shared by every file in it (an archive's thousands of graphs)."""
    real = memo.get(path) if memo is not None else None
    if real is None:
        real = base + name if base.endswith("/") else f"{base}/{name}"
        try:
            if stat.S_ISLNK(os.lstat(real).st_mode):
                real = os.path.realpath(path)
        except OSError:
            pass
        if memo is not None:
            memo[path] = real
    return real


def inside(root: PathLike, name: str, what: str) -> Path:
    """The real path of ``root/name``, proven to lie in ``root`` once every symlink is resolved:
    ``ArchiveCorruptError`` names the path otherwise (``name`` absolute or with ``..``, or a link out)."""
    memo: dict[Any, Any] | None = getattr(_MEMO, "paths", None)
    key = (os.fspath(root), name, Path)
    if memo is not None:
        known: Path | None = memo.get(key)
        if known is not None:
            return known  # proven inside earlier in this batch (a refusal raises and is not kept)
    real = Path(inside_name(root, name, what))
    if memo is not None:
        memo[key] = real
    return real


def inside_name(root: PathLike, name: str, what: str) -> str:
    """``inside`` as a string (``real_name``): the proof alone, where no Path is needed."""
    memo: dict[Any, Any] | None = getattr(_MEMO, "paths", None)
    key = (os.fspath(root), name)
    if memo is not None:
        known: str | None = memo.get(key)
        if known is not None:
            return known
    real = _inside(key[0], str(name), what)
    if memo is not None:
        memo[key] = real
    return real


def _inside(root: str, name: str, what: str) -> str:
    problem = relative_path_problem(name)
    if problem:
        raise ArchiveCorruptError(
            f"{root}: the {what} {name!r:.120} {problem}; archive paths are names relative to the archive. "
            "The file naming it was damaged or edited; save it again."
        )
    base = real_name(root)
    if name == ".":
        return base
    full = os.path.join(root, name)
    real = real_name(full) if "/" in name else _entry(base, name, full, getattr(_MEMO, "paths", None))
    if real != base and not real.startswith(base if base.endswith("/") else base + "/"):
        raise ArchiveCorruptError(
            f"{Path(root) / name}: the {what} resolves to {real}, outside {base}; an archive's files must be in the "
            "archive (a symbolic link points out of it). Copy the files into the archive."
        )
    return real


def sha256_bytes(data: bytes | bytearray | memoryview | mmap.mmap) -> str:
    """Lower-case hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


# hashlib lets the interpreter lock go while it hashes a buffer of this many bytes or more (CPython's
# HASHLIB_GIL_MINSIZE); ``sha256_holding`` feeds it less at a time.
_HASH_HOLDING_CHUNK = 2047


def sha256_holding(data: bytes | bytearray | memoryview) -> str:
    """``sha256_bytes`` without letting the interpreter lock go: for thousands of small buffers hashed on a
    thread beside a thread that runs Python, where each letting-go costs the hashing thread up to the switch
    interval (5 ms) before it has the lock back. The same digest; slower for large buffers."""
    view = memoryview(data).cast("B")
    h = hashlib.sha256()
    for at in range(0, len(view), _HASH_HOLDING_CHUNK):
        h.update(view[at : at + _HASH_HOLDING_CHUNK])
    return h.hexdigest()


def write_addressed(path: Path, data: bytes | bytearray | memoryview, size: int, sha: str, durable: bool) -> None:
    """Writes ``data`` (``size`` bytes, SHA-256 ``sha``) at ``path`` unless the file there already
    holds exactly those bytes."""
    try:
        st = path.stat()
        if stat.S_ISREG(st.st_mode) and st.st_size == size and sha256_file(path) == sha:
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, durable)


def memory_path(archive_dir: PathLike, sha256: str) -> Path:
    """The file of state memory snapshot ``sha256`` in ``archive_dir``."""
    return Path(archive_dir) / MEMORY_DIR / f"{sha256}.bin"


def write_memory(archive_dir: PathLike, data: bytes, sha256: str) -> None:
    """Stores a state memory snapshot (made durable with the archive, see the module docstring)."""
    write_addressed(memory_path(archive_dir, sha256), data, len(data), sha256, durable=False)


def read_stored(root: PathLike, rel: str, what: str, size: int | None, sha256: str, verify: bool = True) -> bytearray:
    """The file ``root/rel`` that the archive lists with ``size`` bytes (None: a size nothing states) and SHA-256
    ``sha256`` (``what`` names it in messages: a kernel image, a state memory snapshot, a module variable value, a
    document): a regular file inside ``root`` (``inside``, ``read_regular``), of that size, and with ``verify``
    of that hash. The one reading of every such file, by LOAD and by ``foundry verify`` alike:
    ``ArchiveCorruptError`` names the file and what is wrong (a missing file and another size or hash are
    reported as ``missing`` and ``checksum`` problems)."""
    path = inside(root, rel, what)
    data = read_regular(path, what, size=size)
    if verify:
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise ArchiveCorruptError(
                f"{path}: the {what}'s content SHA-256 is {actual}, the archive lists {sha256}: it is damaged. Copy "
                "the archive again, or save it again."
            ).as_kind("checksum")
    return data


def read_memory(archive_dir: PathLike, sha256: str, size: int) -> bytearray:
    """The state memory snapshot ``sha256`` of ``size`` bytes, checked (``read_stored``)."""
    return read_stored(archive_dir, f"{MEMORY_DIR}/{sha256}.bin", "state memory snapshot", size, sha256)


def read_value(archive_dir: PathLike, sha256: str, size: int) -> bytearray:
    """The stored value ``sha256`` of ``size`` bytes of a module variable a graph carries, checked
    (``read_stored``)."""
    return read_stored(archive_dir, f"{MEMORY_DIR}/{sha256}.bin", "module variable value", size, sha256)


def write_region_hint(archive_dir: PathLike, base: int, size: int) -> None:
    """``region.json``: the region the archive's graphs were saved in, which LOAD reserves before it
    loads the images (docs/FORMAT.md). Rewritten only when it changes."""
    path = Path(archive_dir) / REGION_HINT
    text = seal({"format": "foundry-region", "format_version": REGION_HINT_VERSION, "base": base, "size": size})
    try:
        if read_regular(path, "region hint", limit=MAX_HINT_BYTES) == text:
            return
    except ArchiveCorruptError:  # missing, or not a hint at all: written anew (a FIFO is not waited on)
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, durable=False)


def read_region_hint(archive_dir: PathLike) -> tuple[int, int] | None:
    """(base, size) from ``region.json``, or None when the archive has none; a damaged hint raises
    ``ArchiveCorruptError`` like any other file of the archive (it is sealed)."""
    path = Path(archive_dir) / REGION_HINT
    if not path.exists() and not path.is_symlink():
        return None
    data = read_regular(inside(archive_dir, REGION_HINT, "region hint"), "region hint", limit=MAX_HINT_BYTES)
    obj = check_format(
        load_sealed(data, str(path), "foundry-region"), "foundry-region", (REGION_HINT_VERSION,), str(path)
    )
    at = At(str(path))
    return field_int(obj, "base", at), field_int(obj, "size", at)


# ------------------------------------------------------------------ kernel images and cached files
def image_path(archive_dir: PathLike, sha256: str) -> Path:
    """The file of image ``sha256`` in ``archive_dir`` (``ValueError`` for a malformed hash)."""
    return Path(archive_dir) / image_relpath(sha256)


def write_image(
    archive_dir: PathLike,
    data: bytes | bytearray | memoryview,
    fmt: ImageFormat | str,
    sha256: str | None = None,
    durable: bool = True,
) -> ImageRef:
    """Store ``data`` under its SHA-256 and describe it. ``sha256`` skips hashing when the caller
    has just computed it; ``durable`` as for write_atomic.

    If the file already exists with the right size it is left alone (content addressing: same name,
    same bytes); otherwise it is written atomically, creating ``images/`` if needed. ``fmt`` must be
    an ``ImageFormat`` or its value, and ``data`` must not be empty (``ValueError`` otherwise).
    """
    fmt = ImageFormat(fmt)
    size = memoryview(data).nbytes
    if size == 0:
        raise ValueError("a kernel image cannot be empty")
    sha = sha256 or hashlib.sha256(data).hexdigest()
    write_addressed(image_path(archive_dir, sha), data, size, sha, durable)
    return ImageRef(sha, size, fmt)


def open_image(archive_dir: PathLike, sha256: str, verify: bool, size: int | None = None) -> bytearray:
    """Image ``sha256`` of ``archive_dir``, read into a bytearray (``read_stored``: only a regular file
    inside the archive, ``size`` bytes exactly when the archive states it, and with ``verify`` of that hash;
    LOAD hands the buffer's address to the driver). An empty file raises ``ArchiveCorruptError`` too; a
    malformed hash ``ValueError``.
    """
    what = f"kernel image {sha256}"
    data = read_stored(archive_dir, image_relpath(sha256), what, size, sha256, verify)
    if not data:
        raise ArchiveCorruptError(f"{image_path(archive_dir, sha256)}: {what} is empty: save the graph again")
    return data


def cache_blob_path(archive_dir: PathLike, sha256: str) -> Path:
    """Where the bytes of a cached file with this SHA-256 are stored in the archive."""
    return Path(archive_dir) / CACHES_DIR / f"{sha256}.bin"
