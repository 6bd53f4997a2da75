"""LOAD: archived graphs back into executable graphs in this process (torch-free).

The steps are separate functions because background loading (pending.py) runs them on different
threads: reading and checking (CPU only), restoring memory (before the program allocates more),
loading images, and building and instantiating (driver work).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..archive import GraphMeta, compare, open_image, read_meta_digest, read_payload_view, resolve_archive_dir
from ..archive.graphfile import template_path
from ..archive.signed_archive import authenticate_graph
from ..archive.signing import SigningKey, configured_key
from ..errors import ArchiveCorruptError, IdentityMismatchError
from ..kernels import registry
from ..machine import current_identity
from ..memory.layout import own_chunks, restore_region
from ..memory.region import region_epoch
from ..memory.snapshot import restore_snapshot
from . import codec

__all__ = [
    "GraphSource",
    "LoadedGraph",
    "build_exec",
    "check_identity",
    "load_graph",
    "load_images",
    "prepare_memory",
    "read_source",
    "resolve_functions",
]

Occupied = Callable[[], list[tuple[int, int]]]


@dataclass
class GraphSource:
    """A graph read and checksummed from disk: its record (or, for a template member, its delta and
    its template's source). A source read with ``lazy`` holds only its metadata until
    ``read_payload()``, so that background LOAD can read records off the calling thread."""

    json_path: Path
    meta: GraphMeta
    _payload: memoryview | None  # a writable view of the buffer the file was read into (no copies)
    archive_dir: Path
    template: GraphSource | None = None
    json_sha256: str = ""  # of the JSON bytes ``meta`` was parsed from

    def read_payload(self) -> memoryview:
        if self._payload is None:
            self._payload = read_payload_view(self.json_path, self.meta)
        return self._payload

    def release_payload(self) -> None:
        """Drops the record from memory; ``payload`` reads it again (checked) when next needed."""
        self._payload = None

    @property
    def payload(self) -> memoryview:
        return self.read_payload()

    @property
    def node_count(self) -> int:
        return int.from_bytes(self.payload[8:12], "little")


@dataclass
class LoadedGraph:
    """An executable graph rebuilt from an archive, with the metadata it was saved with."""

    meta: GraphMeta
    json_path: Path
    graph: int
    exec: int

    def launch(self, stream: int = 0) -> None:
        codec.launch(self.exec, stream)


_cache_lock = threading.Lock()
# Full-record sources by (resolved JSON path, record SHA-256): a template is read once per process
# whether it is loaded itself or reached from its members, and a template saved again (another
# record) is read afresh.
_full_sources: dict[tuple[Path, str], GraphSource] = {}


def read_source(json_path: str | os.PathLike[str], lazy: bool = False) -> GraphSource:
    """Reads and checks a graph's files (and its template's, once per process). CPU work only.

    With a signing key configured (foundry.archive.signing), each graph read (its template included)
    must be listed, with the SHA-256 of the JSON bytes parsed, in the signed manifest of its archive,
    or ``ArchiveSignatureError`` is raised: this runs before anything touches the GPU. A template that
    is itself stored as changes to a template, or a chain of templates that loops back (a graph
    stored as changes to itself), raises ``ArchiveCorruptError``.
    """
    return _read_source(Path(json_path), configured_key(), (), lazy)


def _full_source(json_path: Path, meta: GraphMeta, digest: str, lazy: bool) -> GraphSource:
    assert meta.record is not None
    key = (json_path.resolve(), meta.record.sha256)
    with _cache_lock:
        src = _full_sources.get(key)
        if src is None:
            src = GraphSource(json_path, meta, None, resolve_archive_dir(json_path, meta), None, digest)
            _full_sources[key] = src
    if not lazy:
        src.read_payload()
    return src


def _read_source(json_path: Path, key: SigningKey | None, chain: tuple[Path, ...], lazy: bool) -> GraphSource:
    meta, digest = read_meta_digest(json_path)
    if key is not None:
        authenticate_graph(json_path, meta, key, digest)
    if meta.template is None:
        return _full_source(json_path, meta, digest, lazy)
    here = json_path.resolve()
    tpath = template_path(json_path, meta)
    if tpath == here or tpath in chain:
        loop = " -> ".join(str(p) for p in (*chain, here, tpath))
        raise ArchiveCorruptError(
            f"{json_path} is stored as changes to a template that leads back to itself ({loop}), so it can "
            "never be rebuilt: the archive is damaged (saving one path twice in a process used to do this). "
            "Save the graphs (and the manifest) again."
        )
    with _cache_lock:
        template = _full_sources.get((tpath, meta.template.record_sha256))
    if template is None:
        template = _read_source(tpath, key, (*chain, here), lazy)
    elif key is not None:  # read earlier, perhaps before a key was configured
        authenticate_graph(tpath, template.meta, key, template.json_sha256)
    if not lazy:
        template.read_payload()
    assert template.meta.record is not None
    if template.meta.record.sha256 != meta.template.record_sha256 or template.template is not None:
        raise ArchiveCorruptError(
            f"{json_path} is stored as changes to the template {tpath}, but that file now holds a different "
            "graph: the two come from different saves. Save the graphs (and the manifest) again."
        )
    payload = None if lazy else read_payload_view(json_path, meta)
    return GraphSource(json_path, meta, payload, resolve_archive_dir(json_path, meta), template, digest)


def check_identity(meta: GraphMeta, allow: Iterable[str] = ()) -> None:
    """Refuses an archive made on another GPU model, driver or software stack."""
    mismatches = compare(meta.identity, current_identity(), frozenset(allow))
    if mismatches:
        lines = "\n  ".join(m.message for m in mismatches)
        raise IdentityMismatchError(
            f"graph {meta.name!r} was saved on a different machine:\n  {lines}\nRe-run SAVE on this machine, or "
            f"pass allow_mismatch={{{', '.join(repr(m.field) for m in mismatches)}}} if you accept the consequence."
        )


_restored_memory: set[tuple[int, str]] = set()  # (region epoch, snapshot SHA-256)


def prepare_memory(sources: Sequence[GraphSource], occupied: Occupied | None = None) -> None:
    """Maps SAVE's live memory and writes its state memory back, once per distinct snapshot.

    Must run before the program allocates again: later allocations would otherwise land on memory
    the graphs use. ``occupied`` lists the (address, size) blocks this process's allocator has in use.
    """
    for src in sources:
        restore_region(src.meta.region)
    for src in sources:
        memory = src.meta.memory
        if memory is not None and (region_epoch(), memory.sha256) not in _restored_memory:
            restore_snapshot(src.archive_dir, memory, src.meta.region.base, occupied, own_chunks())
            _restored_memory.add((region_epoch(), memory.sha256))


def load_images(archive_dir: Path, shas: Iterable[str], verify: bool = True, threads: int = 8) -> None:
    """Loads the archived images (each once per process), checking their hashes first. Reading and
    hashing run ahead on ``threads`` threads; the driver loads them on this one, in order (it
    serializes library loads anyway)."""
    todo = [sha for sha in dict.fromkeys(shas) if not registry.is_loaded(sha)]
    if len(todo) < 2 or threads < 2:
        for sha in todo:
            registry.load_image(sha, open_image(archive_dir, sha, verify))
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="foundry-read") as readers:
        futures = [readers.submit(open_image, archive_dir, sha, verify) for sha in todo]
        for sha, future in zip(todo, futures, strict=True):
            registry.load_image(sha, future.result())


def source_images(src: GraphSource) -> dict[str, tuple[Path, int]]:
    """Image SHA-256 -> (directory holding it, size in bytes) for a graph and its template; each
    image is looked up in the archive of the graph that names it."""
    images: dict[str, tuple[Path, int]] = {}
    for s in (src, src.template):
        if s is not None:
            for ref in s.meta.images:
                images.setdefault(ref.sha256, (s.archive_dir, ref.bytes))
    return images


_attrs_applied: dict[tuple[str, str], tuple[int, ...]] = {}


def _merge_attrs(old: tuple[int, ...] | None, new: tuple[int, ...]) -> tuple[int, ...]:
    """One kernel's attributes across the graphs that use it. A program may raise the kernel's
    dynamic shared-memory limit between two captures: the highest limit serves every graph, and a
    lower one would make the other graphs fail at launch. Other attributes follow the graph loaded
    last; an attribute SAVE could not read (INT32_MIN) never overrides a known one."""
    if old is None:
        return new
    merged = [max(old[0], new[0])]
    merged += [n if n != registry.UNKNOWN_ATTR else o for o, n in zip(old[1:], new[1:], strict=True)]
    return tuple(merged)


def resolve_functions(meta: GraphMeta) -> list[int]:
    """CUfunction handles for the graph's function table, with their saved attributes applied (and
    merged across graphs, see _merge_attrs); unchanged attributes are not set again."""
    functions = []
    for ref in meta.functions:
        key = (ref.image, ref.name)
        f = registry.loaded_function(registry.KernelRef(ref.image, ref.name))
        # Set under the lock: templates are built on several threads, and a lower limit set after a
        # higher one would leave the kernel below what another graph needs.
        with _cache_lock:
            applied = _attrs_applied.get(key)
            merged = _merge_attrs(applied, ref.attrs)
            if merged != applied:
                registry.set_function_attrs(f, merged)
            _attrs_applied[key] = merged
        functions.append(f)
    return functions


def build_exec(
    src: GraphSource, functions: Sequence[int] | None = None, template_functions: Sequence[int] | None = None
) -> tuple[int, int]:
    """(CUgraph, CUgraphExec) of a source: a template member is its template's graph with its
    overrides applied before instantiation, so its exec is as good as a natively captured one.
    ``functions``/``template_functions``: the function tables, where resolve_functions ran already."""
    own = resolve_functions(src.meta) if functions is None else functions
    if src.template is None:
        graph = codec.build(src.payload, own)
    else:
        t = src.template
        tf = resolve_functions(t.meta) if template_functions is None else template_functions
        graph, nodes = codec.build_with_nodes(t.payload, tf, t.node_count)
        try:
            codec.apply_overrides(graph, False, nodes, src.payload, own)
        except BaseException:
            codec.destroy_graph(graph)
            raise
    try:
        return graph, codec.instantiate(graph)
    except BaseException:
        codec.destroy_graph(graph)
        raise


def load_graph(
    json_path: str | os.PathLike[str],
    *,
    allow_mismatch: Iterable[str] = (),
    verify_images: bool = True,
    occupied: Occupied | None = None,
) -> LoadedGraph:
    """Reads, checks and rebuilds one graph; the region must be set as in the SAVE run."""
    src = read_source(json_path)
    check_identity(src.meta, allow_mismatch)
    prepare_memory([src], occupied)
    for sha, (directory, _size) in source_images(src).items():
        load_images(directory, [sha], verify_images)
    graph, exec_ = build_exec(src)
    return LoadedGraph(src.meta, src.json_path, graph, exec_)
