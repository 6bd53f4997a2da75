"""SAVE: one captured CUgraph into an archive (torch-free; foundry.capture adds tensors and RNG).

The steps: ``extract`` walks the driver's graph into a record and checks every byte of it (both native:
the record is what LOAD will read, so SAVE refuses what LOAD would refuse);
``save_graph`` gathers everything else (region, kernels and their images, state memory), checks
it, and only then writes. The records of every graph this process saved are kept until
``save_graph_manifest`` groups them (manifest.py).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path

from foundry import kernels
from foundry._state import ProcessState
from foundry.archive import RecordFacts, template_path, write_graph
from foundry.errors import RegionStateError, SaveError, VariableConflictError
from foundry.images import ImageFormat
from foundry.native import codec
from foundry.native.machine import current_identity
from foundry.native.records import RecordScan, scan_record
from foundry.ranks import peers_for_save, rank_here
from foundry.records import parse_record, topology_key, topology_key_of
from foundry.region import region_spec, take_snapshot
from foundry.schema import FunctionRef, GraphMeta, ImageRef, OutputSpec, RngSpec, VariableRef
from foundry.schema.jsonfields import relative_path_problem
from foundry.storage import image_path, write_image, write_memory, write_region_hint
from foundry.timing import Phases
from foundry.version import __version__

from .beside import beside, done, sha256_beside
from .gcpause import gc_paused
from .variables import carried_variables

__all__ = [
    "Extracted",
    "SavedGraph",
    "default_archive_dir",
    "extract",
    "extract_beside",
    "replace_saved",
    "save_graph",
    "save_phases",
    "saved_graphs",
]

DEFAULT_ARCHIVE = "hook_archive"


@dataclass(frozen=True)
class SavedGraph:
    """A graph this process saved: its full record and what the scan found in it, and the delta on disk
    once it became a member."""

    json_path: Path
    meta: GraphMeta
    record: bytes
    scan: RecordScan
    delta: bytes | None = None

    def facts(self) -> RecordFacts:
        """The full record's facts, for writing it again (its topology key is in the metadata)."""
        return RecordFacts(self.scan.function_count, self.scan.event_count, self.meta.topology)


@dataclass(frozen=True)
class Extracted:
    """A captured graph as SAVE reads it: its record, the CUfunction behind each function index, what
    the native scan found in the record (every byte checked as ``parse_record`` checks it), its
    topology key, and the record's SHA-256 digest (hashed beside the rest of SAVE's work: see
    foundry.save.beside)."""

    record: bytes
    functions: tuple[int, ...]
    scan: RecordScan
    topology: str
    record_sha256: Future[bytes]


@dataclass
class _Saves:
    """The graphs this process saved, in first-save order; the images known to be in each archive,
    as (resolved archive dir, SHA-256); where SAVE's time went (seconds per phase, summed over all
    saves: the benchmark reports it); and the module variables each graph carries."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    saved: list[SavedGraph] = field(default_factory=list)
    # resolved graph JSON -> its place in ``saved``: an engine saves thousands of graphs, and each save
    # must find an earlier save of its file without walking the list
    places: dict[Path, int] = field(default_factory=dict)
    written_images: set[tuple[str, str]] = field(default_factory=set)
    phases: Phases = field(default_factory=lambda: Phases(keep_spans=False))
    # The module variables each saved graph needs, by (resolved archive dir, image SHA-256), then by
    # resolved graph JSON: graphs of one archive must agree (see _check_variables), so every graph of
    # one image holds one value, kept once beside the graphs that need it.
    variables: dict[tuple[str, str], dict[Path, tuple[VariableRef, ...] | None]] = field(default_factory=dict)


_STATE = ProcessState("save", _Saves)


def save_phases() -> Phases:
    """Seconds (and page faults) per SAVE phase in this process, summed over every save."""
    return _STATE.get().phases


def default_archive_dir() -> Path:
    """Where images go when save() is not told: $FOUNDRY_ARCHIVE, else the seed's "hook_archive"."""
    return Path(os.environ.get("FOUNDRY_ARCHIVE", DEFAULT_ARCHIVE))


def saved_graphs() -> list[SavedGraph]:
    """Graphs saved by this process, in order (save_graph_manifest writes them into the manifest)."""
    state = _STATE.get()
    with state.lock:
        return list(state.saved)


def replace_saved(graphs: list[SavedGraph]) -> None:
    """Records what save_graph_manifest rewrote (members stored as deltas)."""
    state = _STATE.get()
    with state.lock:
        state.saved[: len(graphs)] = graphs


def _image_format(fmt: kernels.ImageFormat) -> ImageFormat:
    return {kernels.ImageFormat.FATBIN: ImageFormat.FATBIN, kernels.ImageFormat.ELF: ImageFormat.ELF}.get(
        fmt, ImageFormat.PTX
    )


def _kernel_refs(
    functions: Sequence[int],
) -> tuple[tuple[FunctionRef, ...], dict[str, ImageRef], dict[str, dict[int, kernels.ImageRecord]]]:
    """The graph's function table, its images (without their variables yet), and by image the registry
    records of the loads its kernels come from (each fetched once per save)."""
    refs: list[FunctionRef] = []
    images: dict[str, ImageRef] = {}
    loads: dict[str, dict[int, kernels.ImageRecord]] = {}
    records: dict[int, tuple[str, kernels.ImageRecord]] = {}
    # Attributes are read at every save: a program may raise one between two captures.
    for info in kernels.describe_functions(functions):
        index = info.image
        known = records.get(index)
        if known is None:
            record = kernels.image_record(index)
            known = records[index] = (kernels.image_hash(index, record), record)
        sha, record = known
        if sha not in images:
            images[sha] = ImageRef(sha, record.size, _image_format(record.format))
        loads.setdefault(sha, {})[index] = record
        refs.append(FunctionRef(sha, info.name, info.attrs))
    return tuple(refs), images, loads


def _write_images(
    archive_dir: Path, archive_key: str, loads: dict[str, dict[int, kernels.ImageRecord]], images: dict[str, ImageRef]
) -> None:
    """Stores each image in the archive (content-addressed: once per archive and process)."""
    state = _STATE.get()
    for sha, records in loads.items():
        key = (archive_key, sha)
        with state.lock:
            known = key in state.written_images
        # Checked (and repaired) once per process; a stat finds an archive removed since.
        if not known or not image_path(archive_dir, sha).is_file():
            index, record = next(iter(records.items()))
            write_image(archive_dir, kernels.image_bytes(index, record), images[sha].format, sha256=sha, durable=False)
            with state.lock:
                state.written_images.add(key)


def _check_variables(json_path: Path, archive_key: str, images: tuple[ImageRef, ...]) -> None:
    """Refuses a graph that needs other values of a module variable than a graph saved before into the
    same archive (LOAD holds one copy of each image); then records this graph's."""
    state = _STATE.get()
    target = json_path.resolve()
    with state.lock:
        for ref in images:
            # Graphs saved before agree with each other, so the first one other than this graph speaks
            # for all of them.
            known = state.variables.get((archive_key, ref.sha256), {})
            for other, theirs in known.items():
                if other == target:
                    continue
                if theirs != ref.variables:
                    mine = dict((v.name, v.sha256) for v in ref.variables or ())
                    their = dict((v.name, v.sha256) for v in theirs or ())
                    name = min(n for n in {*mine, *their} if mine.get(n) != their.get(n))
                    raise VariableConflictError(
                        f"{json_path} and {other} (saved before into the same archive) need different values of "
                        f"module variable {name} of kernel image {ref.sha256}: the program changed it between "
                        "the two saves. LOAD holds one copy of each image, so both graphs cannot replay as "
                        "captured. Write module variables before the first capture and keep them, or save the "
                        "graphs into separate archives (loaded by separate processes).",
                        image=ref.sha256,
                        variable=name,
                    )
                break
        for ref in images:
            state.variables.setdefault((archive_key, ref.sha256), {})[target] = ref.variables


def _check_outputs(outputs: Sequence[OutputSpec], live: Sequence[tuple[int, int]], base: int) -> None:
    for i, out in enumerate(outputs):
        off = out.address - base
        if not any(start <= off and off + out.nbytes <= start + length for start, length in live):
            raise RegionStateError(
                f"output {i} (address {out.address:#x}, {out.nbytes} bytes) is not in the allocation region's live "
                "memory: it was allocated before set_allocation_region() or after stop_allocation_region(), so LOAD "
                "could not hand it back at the same address"
            )


def extract(graph: int) -> Extracted:
    """Walks a captured CUgraph into a record and scans it (an unsupported node raises here)."""
    return _extract(graph, "extract", "scan", in_line=False)


def extract_beside(graph: int, owner: object) -> Future[Extracted]:
    """``extract`` on a worker thread (foundry.save.beside), for a graph just captured: the walk is native
    and needs no interpreter lock, so it runs while the program goes on (warming up its next graph).
    ``owner`` (the object that destroys ``graph`` when it dies) is held until the walk ends, and let go
    before the Future is done. CUDA graphs are not safe to use from two threads at once: until the Future
    is done, the caller must not touch ``graph`` otherwise (instantiate, change or destroy it)."""
    held = [owner]

    def run() -> Extracted:
        try:
            return _extract(graph, "extract_beside", "scan_beside", in_line=True)
        finally:
            held.clear()

    return beside(run)


def _extract(graph: int, extract_phase: str, scan_phase: str, in_line: bool) -> Extracted:
    phases = save_phases()
    with phases.span(extract_phase):
        record, functions = codec.extract(graph)
    # Needed when the files are written, last: hashed beside the rest, unless already on a worker.
    digest = done(hashlib.sha256(record).digest()) if in_line else sha256_beside(record)
    with phases.span(scan_phase):
        scan = scan_record(record)
        # A child graph's part of the key is its own key's digest, which the native scan leaves to Python.
        topology = topology_key_of(scan.topology) if scan.topology is not None else topology_key(parse_record(record))
    return Extracted(record, tuple(functions), scan, topology, digest)


@gc_paused()
def save_graph(
    graph: int | Extracted,
    json_path: str | os.PathLike[str],
    *,
    outputs: Sequence[OutputSpec] = (),
    rng: RngSpec | None = None,
    archive_dir: str | os.PathLike[str] | None = None,
    name: str | None = None,
    snapshot: bool = True,
) -> GraphMeta:
    """Writes ``<stem>.json`` + ``<stem>.cugraph`` for a captured CUgraph (a handle, or what
    ``extract`` made of it), and its images.

    Everything is gathered and checked before the first byte is written: an unsupported node, an
    unknown kernel, an output outside the region or a module variable that cannot be carried
    (foundry.save.variables) leaves no file behind. ``snapshot`` copies the program's state memory into
    the archive when it is small enough (docs/FORMAT.md, "State memory"); the module variables that
    differ from a fresh load of their image go into the archive with the graph ("Module variables").
    """
    json_path = Path(json_path)
    archive = Path(archive_dir) if archive_dir is not None else default_archive_dir()
    rel_archive = os.path.relpath(archive.resolve(), json_path.resolve().parent)
    if relative_path_problem(rel_archive):
        raise SaveError(
            f"{json_path}: its archive directory {archive} is not at or below the graph's own directory, and "
            "LOAD reads nothing outside a graph's directory. Save the graph's JSON in the archive directory, or "
            "in a directory that holds it."
        )
    if not isinstance(graph, Extracted):
        graph = extract(graph)
    phases = save_phases()
    with phases.span("region"):
        region = region_spec()
        _check_outputs(outputs, region.live, region.base)
        # Before anything is written: memory of other processes LOAD could not map again is refused here.
        peers = peers_for_save(json_path, region.base)
        rank = rank_here()
        identity = current_identity()
    archive_key = str(archive.resolve())  # once per graph, not per image: resolve() walks the path
    with phases.span("images"):
        functions, found, loads = _kernel_refs(graph.functions)
    with phases.span("variables"):
        formats = {sha: ref.format for sha, ref in found.items()}
        carried = carried_variables(loads, formats, identity.compute_capability, phases)
        images = tuple(replace(ref, variables=carried.variables[sha]) for sha, ref in found.items())
        _check_variables(json_path, archive_key, images)
    with phases.span("images"):
        _write_images(archive, archive_key, loads, found)
        for digest, data in carried.blobs.items():
            write_memory(archive, data, digest)
    with phases.span("snapshot"):
        memory = take_snapshot(archive, region.base) if snapshot else None
    with phases.span("metadata"):
        meta = GraphMeta(
            name=name or json_path.stem,
            foundry_version=__version__,
            archive_dir=rel_archive,
            functions=functions,
            images=images,
            events=graph.scan.event_count,
            outputs=tuple(outputs),
            rng=rng,
            region=region,
            identity=identity,
            stats=tuple(sorted(graph.scan.counts.items())),
            topology=graph.topology,
            memory=memory,
            peers=peers,
            rank=rank,
        )
    with phases.span("write"):
        json_path.parent.mkdir(parents=True, exist_ok=True)
        # Not durable yet: save_graph_manifest makes the archive durable at once.
        facts = RecordFacts(graph.scan.function_count, graph.scan.event_count, graph.topology)
        meta = write_graph(
            json_path, meta, graph.record, facts, durable=False, record_sha256=graph.record_sha256.result()
        )
        write_region_hint(archive, region.base, region.size)
        _remember(SavedGraph(json_path, meta, graph.record, graph.scan))
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
    state = _STATE.get()
    target = graph.json_path.resolve()
    with state.lock:
        saved = state.saved
        place = state.places.get(target)
        if place is None:
            state.places[target] = len(saved)
            saved.append(graph)
            return
        saved[place] = graph
        orphans = [
            (i, g)
            for i, g in enumerate(saved)
            if g.delta is not None and g.meta.template is not None and template_path(g.json_path, g.meta) == target
        ]
    for i, member in orphans:
        meta = write_graph(
            member.json_path, replace(member.meta, template=None), member.record, member.facts(), durable=False
        )
        with state.lock:
            if saved[i] is member:
                saved[i] = SavedGraph(member.json_path, meta, member.record, member.scan)
