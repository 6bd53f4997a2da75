"""LOAD's driver work for checked sources: the identity check, SAVE's memory mapped and its state
written back, images loaded, kernels looked up with their saved attributes, graphs built and
instantiated. ``load_graph`` does all of it for one graph, on the calling thread; the background
loader (loader.py) runs the same steps on its threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from foundry import kernels
from foundry._state import ProcessState
from foundry.gate import check_identity as identity_rule
from foundry.gate import manifests_read_once
from foundry.native import codec
from foundry.native.machine import current_identity
from foundry.ranks import check_peers, check_rank
from foundry.records import FUNC_ATTR_UNKNOWN, FuncAttrs
from foundry.region import own_chunks, region_epoch, restore_region, restore_snapshot
from foundry.schema import GraphMeta
from foundry.storage import open_image
from foundry.trust import configured_key

from .source import GraphSource, read_source, read_sources, source_images
from .startup import wait_for_startup
from .variables import write_source_variables

__all__ = [
    "LoadedGraph",
    "Occupied",
    "build_exec",
    "check_identity",
    "graph_label",
    "load_graph",
    "load_images",
    "member_graph",
    "member_graph_nodes",
    "preflight",
    "prepare_memory",
    "resolve_functions",
]

Occupied = Callable[[], list[tuple[int, int]]]


@dataclass
class LoadedGraph:
    """An executable graph rebuilt from an archive, with the metadata it was saved with."""

    meta: GraphMeta
    json_path: Path
    graph: int
    exec: int

    def launch(self, stream: int = 0) -> None:
        codec.launch(self.exec, stream)


@dataclass
class _Applied:
    """State memory snapshots written back, by (region epoch, snapshot SHA-256), and the attributes
    set on each kernel, by (image SHA-256, name)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    memory: set[tuple[int, str]] = field(default_factory=set)
    attrs: dict[tuple[str, str], FuncAttrs] = field(default_factory=dict)


_STATE = ProcessState("load.applied", _Applied)


def check_identity(meta: GraphMeta, allow: Iterable[str] = ()) -> None:
    """Refuses an archive made on another GPU model, driver or software stack (the gate's identity rule)."""
    identity_rule(f"graph {meta.name!r}", meta.identity, current_identity(), allow)


def prepare_memory(sources: Sequence[GraphSource], occupied: Occupied | None = None) -> None:
    """Maps SAVE's live memory and writes its state memory back, once per distinct snapshot.

    Must run before the program allocates again: later allocations would otherwise land on memory
    the graphs use. ``occupied`` lists the (address, size) blocks this process's allocator has in use.
    """
    state = _STATE.get()
    # Rank and peer mappings first: a missing peer mapping must be refused before restore_region maps
    # fresh memory where the peer's buffer belongs (foundry/ranks/peers.py).
    placed = {(s.meta.rank, s.meta.peers, s.meta.region.base): str(s.json_path) for s in sources}
    for (rank, peers, base), source in placed.items():
        check_rank(rank, source)
        check_peers(peers, base, source)
    for src in sources:
        restore_region(src.meta.region)
    for src in sources:
        memory = src.meta.memory
        if memory is None:
            continue
        key = (region_epoch(), memory.sha256)
        with state.lock:
            done = key in state.memory
        if not done:
            restore_snapshot(src.archive_dir, memory, src.meta.region.base, occupied, own_chunks())
            with state.lock:
                state.memory.add(key)


def load_images(
    archive_dir: Path,
    shas: Iterable[str],
    verify: bool = True,
    threads: int = 8,
    sizes: Mapping[str, int] | None = None,
) -> None:
    """Loads the archived images (each once per process), checking their hashes (and ``sizes``, where the
    archive states them) first. Reading and hashing run ahead on ``threads`` threads; the driver loads
    them on this one, in order (it serializes library loads anyway)."""
    todo = [sha for sha in dict.fromkeys(shas) if not kernels.is_loaded(sha)]
    size = (sizes or {}).get

    def read(sha: str) -> bytearray:
        return open_image(archive_dir, sha, verify, size(sha))

    if len(todo) < 2 or threads < 2:
        for sha in todo:
            kernels.load_image(sha, read(sha))
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="foundry-read") as readers:
        futures = [readers.submit(read, sha) for sha in todo]
        for sha, future in zip(todo, futures, strict=True):
            kernels.load_image(sha, future.result())


def _merge_attrs(old: FuncAttrs | None, new: FuncAttrs) -> FuncAttrs:
    """One kernel's attributes across the graphs that use it: the graph loaded last's, but that an attribute SAVE
    could not read (INT32_MIN) never overrides a known one. The dynamic shared-memory limit needs no rule here:
    the native side only ever raises it (``fdy_func_set_attrs``), so the highest any graph asked for stays."""
    if old is None:
        return new
    return FuncAttrs(*(o if n == FUNC_ATTR_UNKNOWN else n for o, n in zip(old, new, strict=True)))


def resolve_functions(meta: GraphMeta) -> list[int]:
    """CUfunction handles for the graph's function table, with their saved attributes applied (and
    merged across graphs, see _merge_attrs); unchanged attributes are not set again."""
    state = _STATE.get()
    functions = []
    for ref in meta.functions:
        key = (ref.image, ref.name)
        f = kernels.loaded_function(kernels.KernelRef(ref.image, ref.name))
        # Under the lock: templates are built on several threads, and what was applied is noted once.
        with state.lock:
            applied = state.attrs.get(key)
            merged = _merge_attrs(applied, ref.attrs)
            if merged != applied:
                kernels.set_function_attrs(f, merged)
            state.attrs[key] = merged
        functions.append(f)
    return functions


def graph_label(src: GraphSource) -> str:
    """How LOAD's messages name a graph: its name and its metadata file."""
    return f"graph {src.meta.name!r} ({src.json_path})"


def member_graph(src: GraphSource, functions: Sequence[int], template_functions: Sequence[int]) -> int:
    """The CUgraph of template member ``src``: its template's graph, built from the template's record,
    with the member's values set on the nodes its delta holds (same topology and node order as the
    template's graph)."""
    return member_graph_nodes(src, functions, template_functions)[0]


def member_graph_nodes(
    src: GraphSource, functions: Sequence[int], template_functions: Sequence[int]
) -> tuple[int, codec.NodeHandles]:
    """``member_graph`` with the handles of its top-level nodes (in the template's node order)."""
    t = src.template
    assert t is not None
    graph, nodes = codec.build_with_nodes(t.payload, template_functions, t.node_count, graph_label(t))
    try:
        codec.apply_overrides(graph, False, nodes, src.payload, functions, graph_label(src))
    except BaseException:
        codec.destroy_graph(graph)
        raise
    return graph, nodes


def build_exec(
    src: GraphSource, functions: Sequence[int] | None = None, template_functions: Sequence[int] | None = None
) -> tuple[int, int]:
    """(CUgraph, CUgraphExec) of a source: a template member is its template's graph with its
    overrides applied before instantiation, so its exec is as good as a natively captured one.
    ``functions``/``template_functions``: the function tables, where resolve_functions ran already.
    The caller has written the module variables of its images and its template's (load/variables.py:
    ``load_graph`` just before, the loader once a source's images are in)."""
    own = resolve_functions(src.meta) if functions is None else functions
    if src.template is None:
        graph = codec.build(src.payload, own, graph_label(src))
    else:
        tf = resolve_functions(src.template.meta) if template_functions is None else template_functions
        graph = member_graph(src, own, tf)
    try:
        return graph, codec.instantiate_uploaded(graph)
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
    wait_for_startup()  # load_cuda_modules_and_libraries' background work (its error, if it failed)
    src = read_source(json_path)
    check_identity(src.meta, allow_mismatch)
    prepare_memory([src], occupied)
    for sha, (directory, size) in source_images(src).items():
        load_images(directory, [sha], verify_images, sizes={sha: size})
    write_source_variables(src)  # its images' module variables, before anything of it can replay
    graph, exec_ = build_exec(src)
    return LoadedGraph(src.meta, src.json_path, graph, exec_)


def preflight(paths: Iterable[str | os.PathLike[str]]) -> list[GraphSource]:
    """LOAD's eager run of the gate (foundry.gate) for the graphs at ``paths``: every rule, now and in full,
    where LOAD applies each as it reads the file it is about. LOAD's first step (``read_sources``: each graph's
    metadata, its listing in its archive's manifest and, with a signing key configured, the manifest's
    signature, its template), then the gate run eagerly on these graphs (foundry.verify.verify_graphs): records,
    images, state memory and carried module variables read and checked against the digests and sizes the
    archive states; what the metadata, the manifest and the records say of each other; kernels and variables
    against their images; template members against their templates; every address a graph uses inside the
    memory LOAD maps; the region hint. The identity check is LOAD's own, when it builds. Returns the sources;
    raises the first problem as ``foundry verify`` reports it (an ``ArchiveError`` whose message names the
    file, and how many more there are)."""
    # Imported here, not with LOAD: no other step needs verify's checks, and importing them costs every
    # engine's start-up (load_cuda_modules_and_libraries imports this module) a few hundredths of a second.
    from foundry.verify import verify_graphs

    paths = list(paths)
    with manifests_read_once():  # both steps check each graph against one reading of its manifest
        sources = read_sources(paths, lazy=True)
        error = verify_graphs(paths, configured_key()).error()
    if error is not None:
        raise error
    return sources
