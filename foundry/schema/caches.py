"""An engine's caches carried by an archive (docs/FORMAT.md, "Engine caches"): the files the engine's own
compilers wrote (vLLM's torch.compile artifacts, Triton's kernels), stored byte for byte as
``caches/<sha256>.bin`` and listed, each under the path it had in its cache directory, by one document,
``engine_caches.json``, which the manifest lists like every document. So the manifest's seal (and signature)
covers the listing, and the listing every byte of every file.

These files are code: Inductor's generated Python, pickled artifacts, cubins and compiled launchers. This
module only states and checks their listing (names, sizes, bounds); who may hand them to an engine is
the gate's decision (foundry/gate/caches.py). Pure bytes: no CUDA, no torch, no engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .jsondocs import check_format
from .jsonfields import At, field, field_int, field_sha256, field_str, get_list, get_obj, get_str

__all__ = [
    "CACHES_DIR",
    "CACHES_DOCUMENT",
    "CACHES_FORMAT",
    "CACHES_VERSION",
    "MAX_CACHE_BYTES",
    "MAX_CACHE_FILES",
    "MAX_CACHE_FILE_BYTES",
    "CacheFile",
    "CachePayload",
    "CacheTree",
    "cache_name_problem",
    "cache_path_problem",
]

CACHES_DOCUMENT = "engine_caches.json"
CACHES_FORMAT = "foundry-engine-caches"
CACHES_VERSION = 1
CACHES_DIR = "caches"
"""Where the cached files' bytes live in an archive: ``caches/<sha256>.bin``, content-addressed."""

# Bounds a reader holds the listing to before it copies a byte. An engine's caches for one configuration are a
# few thousand files and some hundreds of MiB (vLLM's AOT artifact of an 8B model, Triton's kernels); the bounds
# leave room for a large MoE model and refuse a listing that would fill a disk.
MAX_CACHE_FILES = 100_000
MAX_CACHE_FILE_BYTES = 4 << 30
MAX_CACHE_BYTES = 16 << 30
_MAX_PATH_CHARS = 1024  # a cache path: Triton's are <key>/<kernel name of at most 150 characters>.<ext>
_MAX_COMPONENT_BYTES = 255  # what a Linux file system takes as one name
_MAX_DEPTH = 16
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def cache_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a cache (``triton``, ``vllm``), or None: a short lower-case identifier. The
    name only picks an entry of the reading program's own table of caches; it never names a path or code."""
    return None if _NAME.fullmatch(name) else "is not a cache name (a lower-case identifier of at most 32 characters)"


def cache_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be where a cached file goes in its cache directory, or None: a relative POSIX path of
    plain names, without ``.``, ``..``, empty components, NUL or backslashes, bounded in length and depth.
    Extraction writes ``<fresh directory>/<cache>/<path>``, so an accepted path never leaves that directory."""
    if not path or len(path) > _MAX_PATH_CHARS:
        return f"is empty or longer than {_MAX_PATH_CHARS} characters"
    if "\0" in path or "\\" in path:
        return "holds a NUL byte or a backslash"
    if path.startswith("/"):
        return "is an absolute path"
    parts = path.split("/")
    if len(parts) > _MAX_DEPTH:
        return f"is more than {_MAX_DEPTH} directories deep"
    for part in parts:
        if part in ("", ".", ".."):
            return "has an empty, '.' or '..' component (it would leave its cache directory, or name it twice)"
        if len(part.encode("utf-8", "surrogatepass")) > _MAX_COMPONENT_BYTES:
            return f"has a component longer than {_MAX_COMPONENT_BYTES} bytes"
    return None


@dataclass(frozen=True)
class CacheFile:
    """One file of a cache: its path in the cache directory, its size and the SHA-256 of its bytes."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class CacheTree:
    """One cache directory's files (``name``: which cache, from the engine plugin's table)."""

    name: str
    files: tuple[CacheFile, ...]


@dataclass(frozen=True)
class CachePayload:
    """What ``engine_caches.json`` says: what the caches were made with (``identity``: torch, Triton, the
    engine, CUDA, the GPU; a reader uses them only where every value is its own) and each cache's files."""

    identity: tuple[tuple[str, str], ...]
    trees: tuple[CacheTree, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for t in self.trees for f in t.files)

    @property
    def file_count(self) -> int:
        return sum(len(t.files) for t in self.trees)

    def blobs(self) -> dict[str, int]:
        """SHA-256 -> size of every stored file (one blob serves every file of those bytes)."""
        return {f.sha256: f.bytes for t in self.trees for f in t.files}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CACHES_FORMAT,
            "format_version": CACHES_VERSION,
            "identity": dict(self.identity),
            "caches": [
                {"name": t.name, "files": [{"path": f.path, "bytes": f.bytes, "sha256": f.sha256} for f in t.files]}
                for t in self.trees
            ],
        }

    @classmethod
    def from_json(cls, doc: Any, source: str) -> CachePayload:
        """The payload of the document ``doc`` (read from ``source``), every name, path, size and bound
        checked: ``ArchiveForeignError``/``ArchiveVersionError`` for another format or version,
        ``ArchiveCorruptError`` naming the key otherwise."""
        doc = check_format(doc, CACHES_FORMAT, (CACHES_VERSION,), source)
        at = At(source)
        identity_obj, identity_at = field(doc, "identity", at)
        identity = tuple(
            (str(k), get_str(v, identity_at.key(str(k)))) for k, v in get_obj(identity_obj, identity_at).items()
        )
        trees_list, trees_at = field(doc, "caches", at)
        trees: list[CacheTree] = []
        names: set[str] = set()
        count = total = 0
        for i, item in enumerate(get_list(trees_list, trees_at)):
            tree_at = trees_at.index(i)
            obj = get_obj(item, tree_at)
            name = field_str(obj, "name", tree_at)
            problem = cache_name_problem(name) or ("is listed twice" if name in names else None)
            if problem:
                tree_at.key("name").fail(f"{name!r:.60} {problem}")
            names.add(name)
            files_list, files_at = field(obj, "files", tree_at)
            files = get_list(files_list, files_at)
            count += len(files)
            if count > MAX_CACHE_FILES:
                files_at.fail(f"the caches list more than {MAX_CACHE_FILES} files, more than a reader takes")
            tree = CacheTree(name, tuple(_file(f, files_at.index(j)) for j, f in enumerate(files)))
            _check_paths(tree, files_at)
            total += sum(f.bytes for f in tree.files)
            if total > MAX_CACHE_BYTES:
                files_at.fail(f"the caches hold more than {MAX_CACHE_BYTES} bytes, more than a reader takes")
            trees.append(tree)
        return cls(identity, tuple(trees))


def _file(value: Any, at: At) -> CacheFile:
    obj = get_obj(value, at)
    path = field_str(obj, "path", at)
    problem = cache_path_problem(path)
    if problem:
        at.key("path").fail(f"{path!r:.120} {problem}")
    size = field_int(obj, "bytes", at, (0, MAX_CACHE_FILE_BYTES))
    return CacheFile(path, size, field_sha256(obj, "sha256", at))


def _check_paths(tree: CacheTree, at: At) -> None:
    """No path twice, and none a directory of another (``a`` and ``a/b``): every file lands on its own path."""
    paths = {f.path for f in tree.files}
    if len(paths) != len(tree.files):
        at.fail(f"cache {tree.name!r} lists a path twice")
    for f in tree.files:
        parts = f.path.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in paths:
                at.fail(f"cache {tree.name!r} lists {'/'.join(parts[:depth])!r} as a file and as a directory")
