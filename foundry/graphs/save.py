"""SAVE: one captured CUgraph into an archive (torch-free; foundry.capture adds tensors and RNG)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .. import __version__
from ..archive import (
    FunctionRef,
    GraphMeta,
    GraphRecord,
    ImageFormat,
    ImageRef,
    OutputSpec,
    RngSpec,
    image_path,
    node_counts,
    parse_record,
    write_graph,
    write_image,
    write_region_hint,
)
from ..archive.graphfile import template_path
from ..errors import RegionStateError
from ..kernels import registry
from ..machine import current_identity
from ..memory.layout import region_spec
from ..memory.snapshot import take_snapshot
from . import codec
from .gcpause import gc_paused
from .phases import Phases

__all__ = ["SAVE_PHASES", "SavedGraph", "default_archive_dir", "replace_saved", "save_graph", "saved_graphs"]

# Where this process's SAVE time went (seconds per phase, summed over all saves): the benchmark reports it.
SAVE_PHASES = Phases(time.perf_counter(), keep_spans=False)

DEFAULT_ARCHIVE = "hook_archive"


@dataclass(frozen=True)
class SavedGraph:
    """A graph this process saved: its full record, and the delta on disk once it became a member."""

    json_path: Path
    meta: GraphMeta
    record: bytes
    delta: bytes | None = None
    parsed: GraphRecord | None = None


_lock = threading.Lock()
_saved: list[SavedGraph] = []
_written_images: set[tuple[str, str]] = set()  # (archive dir, sha256)


def default_archive_dir() -> Path:
    """Where images go when save() is not told: $FOUNDRY_ARCHIVE, else the seed's "hook_archive"."""
    return Path(os.environ.get("FOUNDRY_ARCHIVE", DEFAULT_ARCHIVE))


def saved_graphs() -> list[SavedGraph]:
    """Graphs saved by this process, in order (save_graph_manifest writes them into the manifest)."""
    with _lock:
        return list(_saved)


def replace_saved(graphs: list[SavedGraph]) -> None:
    """Records what save_graph_manifest rewrote (members stored as deltas)."""
    with _lock:
        _saved[: len(graphs)] = graphs


def _image_format(fmt: registry.ImageFormat) -> ImageFormat:
    return {registry.ImageFormat.FATBIN: ImageFormat.FATBIN, registry.ImageFormat.ELF: ImageFormat.ELF}.get(
        fmt, ImageFormat.PTX
    )


def _kernel_refs(functions: Sequence[int], archive_dir: Path) -> tuple[tuple[FunctionRef, ...], tuple[ImageRef, ...]]:
    refs: list[FunctionRef] = []
    images: dict[str, ImageRef] = {}
    archive_key = str(archive_dir.resolve())  # once per graph, not per image: resolve() walks the path
    for function in functions:
        index, name = registry.resolve(function)
        sha = registry.image_hash(index)
        if sha not in images:
            record = registry.image_record(index)
            fmt = _image_format(record.format)
            key = (archive_key, sha)
            with _lock:
                known = key in _written_images
            # Checked (and repaired) once per process; a stat finds an archive removed since.
            if not known or not image_path(archive_dir, sha).is_file():
                write_image(archive_dir, registry.image_bytes(index), fmt, sha256=sha, durable=False)
                with _lock:
                    _written_images.add(key)
            images[sha] = ImageRef(sha, record.size, fmt)
        # Read at every save: a program may raise an attribute between two captures.
        refs.append(FunctionRef(sha, name, registry.function_attrs(function)))
    return tuple(refs), tuple(images.values())


def _check_outputs(outputs: Sequence[OutputSpec], live: Sequence[tuple[int, int]], base: int) -> None:
    for i, out in enumerate(outputs):
        off = out.address - base
        if not any(start <= off and off + out.nbytes <= start + length for start, length in live):
            raise RegionStateError(
                f"output {i} (address {out.address:#x}, {out.nbytes} bytes) is not in the allocation region's live "
                "memory: it was allocated before set_allocation_region() or after stop_allocation_region(), so LOAD "
                "could not hand it back at the same address"
            )


@gc_paused()
def save_graph(
    graph: int,
    json_path: str | os.PathLike[str],
    *,
    outputs: Sequence[OutputSpec] = (),
    rng: RngSpec | None = None,
    archive_dir: str | os.PathLike[str] | None = None,
    name: str | None = None,
    extracted: tuple[bytes, list[int]] | None = None,
    snapshot: bool = True,
    parsed: GraphRecord | None = None,
) -> GraphMeta:
    """Writes ``<stem>.json`` + ``<stem>.cugraph`` for a captured CUgraph, and its images.

    Everything is gathered and checked before the first byte is written: an unsupported node or an
    unknown kernel leaves no file behind. ``extracted`` passes in what ``codec.extract(graph)``
    already returned, to avoid walking the graph twice. ``snapshot`` copies the program's state
    memory into the archive when it is small enough (docs/FORMAT.md, "State memory").
    """
    ph = SAVE_PHASES
    clock = time.perf_counter()
    json_path = Path(json_path)
    archive = Path(archive_dir) if archive_dir is not None else default_archive_dir()
    record, functions = extracted if extracted is not None else codec.extract(graph)
    clock = ph.add("extract", clock)
    if parsed is None:
        parsed = parse_record(record)
    clock = ph.add("parse", clock)
    region = region_spec()
    _check_outputs(outputs, region.live, region.base)
    identity = current_identity()
    clock = ph.add("region", clock)
    functions_refs, images = _kernel_refs(functions, archive)
    clock = ph.add("images", clock)
    memory = take_snapshot(archive, region.base) if snapshot else None
    clock = ph.add("snapshot", clock)
    rel_archive = os.path.relpath(archive.resolve(), json_path.resolve().parent)
    meta = GraphMeta(
        name=name or json_path.stem,
        foundry_version=__version__,
        archive_dir=rel_archive,
        functions=functions_refs,
        images=images,
        events=parsed.event_count,
        outputs=tuple(outputs),
        rng=rng,
        region=region,
        identity=identity,
        stats=tuple(sorted(node_counts(parsed).items())),
        topology="",  # write_graph fills it from the record (walked once)
        memory=memory,
    )
    clock = ph.add("metadata", clock)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    # Not durable yet: save_graph_manifest makes the archive durable at once.
    meta = write_graph(json_path, meta, record, parsed=parsed, durable=False)
    write_region_hint(archive, region.base, region.size)
    _remember(SavedGraph(json_path, meta, record, parsed=parsed))
    ph.add("write", clock)
    return meta


def _remember(graph: SavedGraph) -> None:
    """Adds a saved graph to this process's list, replacing an earlier save of the same file.

    Saving a path again overwrites its files, so only the last save may be listed: a second entry for
    one file would make save_graph_manifest list the graph twice and store it as changes to itself.
    The replacement keeps the earlier entry's place, so the manifest's order stays that of first saves.
    Members that an earlier manifest stored as changes to the replaced graph are written back as full
    records: the template they were stored against is gone, and the next manifest may not make them
    members of the new one.
    """
    target = graph.json_path.resolve()
    with _lock:
        for i, earlier in enumerate(_saved):
            if earlier.json_path.resolve() == target:
                _saved[i] = graph
                break
        else:
            _saved.append(graph)
            return
        orphans = [
            (i, g)
            for i, g in enumerate(_saved)
            if g.delta is not None and g.meta.template is not None and template_path(g.json_path, g.meta) == target
        ]
    for i, member in orphans:
        meta = write_graph(
            member.json_path, replace(member.meta, template=None), member.record, parsed=member.parsed, durable=False
        )
        with _lock:
            if _saved[i] is member:
                _saved[i] = SavedGraph(member.json_path, meta, member.record, parsed=member.parsed)
