"""LOAD: an archived graph back into an executable graph in this process (torch-free)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..archive import GraphMeta, compare, open_image, read_graph, resolve_archive_dir
from ..errors import IdentityMismatchError
from ..kernels import registry
from ..machine import current_identity
from ..memory.layout import own_chunks, restore_region
from ..memory.snapshot import restore_snapshot
from . import codec

__all__ = ["LoadedGraph", "check_identity", "load_graph", "load_images", "resolve_functions", "restore_memory"]


@dataclass
class LoadedGraph:
    """An executable graph rebuilt from an archive, with the metadata it was saved with."""

    meta: GraphMeta
    json_path: Path
    graph: int
    exec: int

    def launch(self, stream: int = 0) -> None:
        codec.launch(self.exec, stream)


def check_identity(meta: GraphMeta, allow: Iterable[str] = ()) -> None:
    """Refuses an archive made on another GPU model, driver or software stack."""
    mismatches = compare(meta.identity, current_identity(), frozenset(allow))
    if mismatches:
        lines = "\n  ".join(m.message for m in mismatches)
        raise IdentityMismatchError(
            f"graph {meta.name!r} was saved on a different machine:\n  {lines}\nRe-run SAVE on this machine, or "
            f"pass allow_mismatch={{{', '.join(repr(m.field) for m in mismatches)}}} if you accept the consequence."
        )


def load_images(archive_dir: Path, shas: Iterable[str], verify: bool = True) -> None:
    """Loads the archived images (each once per process), checking their hashes first."""
    for sha in shas:
        if registry.is_loaded(sha):
            continue
        registry.load_image(sha, open_image(archive_dir, sha, verify))


def resolve_functions(meta: GraphMeta) -> list[int]:
    """CUfunction handles for the graph's function table, with their saved attributes applied."""
    functions = []
    for ref in meta.functions:
        f = registry.loaded_function(registry.KernelRef(ref.image, ref.name))
        registry.set_function_attrs(f, ref.attrs)
        functions.append(f)
    return functions


_restored_memory: set[str] = set()


def restore_memory(
    archive_dir: Path, meta: GraphMeta, occupied: Callable[[], list[tuple[int, int]]] | None = None
) -> None:
    """Writes SAVE's state memory back (once per snapshot per process), around this process's own data."""
    if meta.memory is None or meta.memory.sha256 in _restored_memory:
        return
    restore_snapshot(archive_dir, meta.memory, meta.region.base, occupied, own_chunks())
    _restored_memory.add(meta.memory.sha256)


def load_graph(
    json_path: str | os.PathLike[str],
    *,
    allow_mismatch: Iterable[str] = (),
    verify_images: bool = True,
    occupied: Callable[[], list[tuple[int, int]]] | None = None,
) -> LoadedGraph:
    """Reads, checks and rebuilds one graph; the region must be set as in the SAVE run.

    ``occupied`` lists the (address, size) blocks this process's allocator has in use, so that SAVE's
    state memory can be restored around them (see restore_memory).
    """
    json_path = Path(json_path)
    meta, record = read_graph(json_path)
    check_identity(meta, allow_mismatch)
    archive_dir = resolve_archive_dir(json_path, meta)
    restore_region(meta.region)
    restore_memory(archive_dir, meta, occupied)
    load_images(archive_dir, (i.sha256 for i in meta.images), verify_images)
    graph = codec.build(record, resolve_functions(meta))
    try:
        exec_ = codec.instantiate(graph)
    except BaseException:
        codec.destroy_graph(graph)
        raise
    return LoadedGraph(meta, json_path, graph, exec_)
