"""The ``files`` check of ``foundry verify``: every file readable, known, and matching its checksum.

Follows the checksums down: manifest -> graph JSON -> ``.cugraph`` (record or delta) -> images ->
state memory, and cross-checks what two files both say (names, record hashes, node counts, topology
keys, function and event counts). A graph's JSON and container are read from where its archive stores them
(foundry.archive.stored: its files or the graph bundle), as LOAD reads them. Never raises for archive content;
every defect becomes a Problem.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from foundry._state import ProcessState
from foundry.archive import GraphStore, Manifest, read_graph_payload, resolve_archive_dir, template_path
from foundry.errors import ArchiveError
from foundry.images import ImageFormat, KernelNames, ModuleVariables, detect_format, scan_image
from foundry.records import node_counts, parse_delta, parse_record, topology_key
from foundry.schema import GraphStorage, image_relpath
from foundry.schema.jsonfields import relative_path_problem
from foundry.storage import MEMORY_DIR, open_image, read_memory, read_value
from foundry.trust import SigningKey

from .documents import listed_document
from .findings import Findings, GraphUnderCheck, ImageInfo, kind_of
from .graph import authenticate_graph, read_graph_meta
from .report import Check, ProblemKind

__all__ = [
    "check_bundle",
    "check_consistency",
    "check_documents",
    "check_image_file",
    "check_images_dir",
    "check_listed_values",
    "check_memory",
    "check_variable_files",
    "read_graph_files",
    "read_listed_graphs",
]


def read_checked(shown: Path, read: Callable[[], bytearray], found: Findings) -> bytes | None:
    """The bytes of a file the archive lists (``shown``), read as LOAD reads it (``read``: ``open_image``,
    ``read_memory``, ``read_stored``), or None with LOAD's refusal reported."""
    try:
        return bytes(read())
    except ArchiveError as exc:
        found.refuse(Check.FILES, shown, exc)
        return None


def check_bundle(directory: Path, manifest: Manifest, store: GraphStore, found: Findings) -> bool:
    """The manifest's graph bundle, where it names one, opened as LOAD opens it for the first graph it reads from
    it (``GraphStore.listing``: the file it states, of its size, laid out as SAVE lays it out, archive/bundle.py);
    LOAD's refusal is reported once, for the bundle, and its graphs are not read. Whether its graphs can be read.
    Each graph in a sound bundle is checked with the graph (``read_graph_files``). A version-2 manifest's bundle,
    a second copy of graph files that are there too, is not read (LOAD does not read it either): noted."""
    if manifest.stale_bundle is not None:
        found.note(
            f"{directory / manifest.stale_bundle}: a second copy of the graph files, written by an earlier Foundry "
            "(manifest format version 2); LOAD reads the files and ignores it. Save the archive again to store each "
            "graph once."
        )
    if manifest.bundle is None:
        return True
    first = manifest.graphs[manifest.bundled()[0]]
    try:
        store.listing(Path(os.path.normpath(directory / first.json)))
    except ArchiveError as exc:
        found.refuse(Check.FILES, directory / manifest.bundle.file, exc)
        return False
    return True


def check_image_file(directory: Path, sha: str, size: int, found: Findings) -> ImageInfo:
    """Reads image ``sha`` of archive ``directory``, which must hold ``size`` bytes with that SHA-256, as LOAD
    reads it (``open_image``); reports LOAD's refusal, and reads the format and kernel names of a sound image."""
    path = directory / image_relpath(sha)
    data = read_checked(path, lambda: open_image(directory, sha, True, size), found)
    if data is None:
        return ImageInfo(sha, path, False)
    fmt = detect_format(data)
    if fmt is None:
        return ImageInfo(sha, path, True)
    names, variables = _scan(sha, data, fmt)
    return ImageInfo(sha, path, True, fmt, names.names, names.complete, variables, names.params)


@dataclass
class _Scans:
    """What sound images hold, by SHA-256 (the bytes were proven to have it, so the scan is theirs):
    scanning a fatbin decompresses every entry, and a process may verify one archive many times."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_sha: dict[tuple[str, ImageFormat], tuple[KernelNames, ModuleVariables]] = field(default_factory=dict)


_SCANS = ProcessState("gate.scans", _Scans)
_SCANS_KEPT = 256


def _scan(sha: str, data: bytes, fmt: ImageFormat) -> tuple[KernelNames, ModuleVariables]:
    state = _SCANS.get()
    with state.lock:
        found = state.by_sha.get((sha, fmt))
    if found is None:
        found = scan_image(data, fmt)
        with state.lock:
            if len(state.by_sha) >= _SCANS_KEPT:
                state.by_sha.pop(next(iter(state.by_sha)))
            state.by_sha[(sha, fmt)] = found
    return found


def check_images_dir(found: Findings, images: dict[str, ImageInfo], directory: Path, wanted: dict[str, int]) -> None:
    """Checks each image ``sha -> bytes`` of ``wanted`` in archive ``directory`` not checked yet."""
    for sha, size in wanted.items():
        if sha not in images:
            images[sha] = check_image_file(directory, sha, size, found)


def read_graph_files(
    json_path: Path, found: Findings, store: GraphStore, key: SigningKey | None = None
) -> GraphUnderCheck | None:
    """Reads and checks one graph as LOAD reads it (load/source.py), from where its archive stores it (``store``:
    LOAD's, foundry.gate.graph_store): its JSON held to its listing before it is decoded and its metadata
    (``read_graph_meta``), its archive's manifest (signed with ``key``, where one is given) listing it as it is
    (``authenticate_graph``), its record or delta (``read_graph_payload``), each refusal reported as LOAD raises
    it; then, beyond what LOAD reads in Python, the record's or delta's structure (LOAD's native codec checks it
    where it builds the graph). None when it cannot be read; a graph its manifest does not vouch for is still
    read on, so that everything else wrong with it is reported too."""
    where = str(json_path)
    try:
        meta, got = read_graph_meta(json_path, store)
        # The paths the metadata names stay inside their roots (as LOAD proves them first), so that later checks
        # can use them: its archive directory, its template.
        resolve_archive_dir(json_path, meta)
        if meta.template is not None:
            template_path(json_path, meta)
    except ArchiveError as exc:
        found.refuse(Check.FILES, where, exc)
        return None
    try:
        authenticate_graph(json_path, meta, key, got.sha256)
    except ArchiveError as exc:
        found.refuse(Check.FILES, where, exc)
    listing = got.listing
    # How the rules beyond LOAD's name the graph, in either mode alike (LOAD's own messages name its file).
    label = f"graph {meta.name!r}"
    if listing is not None and listing.bundle is not None:
        label = f"{label}, stored in {listing.bundle.path.name}"
    graph = GraphUnderCheck(json_path, label, meta, got.sha256, entry=listing.entry if listing is not None else None)
    try:
        payload = read_graph_payload(json_path, meta, listing, verify=True)
        if meta.template is not None:
            graph.delta = parse_delta(payload)
        else:
            graph.record = parse_record(payload)
    except ArchiveError as exc:
        found.refuse(Check.FILES, where, exc)
        return None
    return graph


def read_listed_graphs(
    directory: Path, manifest: Manifest, found: Findings, store: GraphStore, bundle_sound: bool = True
) -> list[GraphUnderCheck | None]:
    """Every graph the manifest lists, read and checked in manifest order by the name it lists (as LOAD is
    given it: ``directory/json``), None where it cannot be read or is saved beside the archive rather than in
    it (verify that graph by its own path). Nothing is read through a path that leaves the archive: a graph
    listed by a name inside it that is a symbolic link out of it, dangling or not, is refused before it is
    read, as LOAD refuses it (archive.read_graph_json). Graphs stored in a bundle that is not sound
    (``check_bundle`` reported it) are not read."""
    out: list[GraphUnderCheck | None] = []
    for index, entry in enumerate(manifest.graphs):
        if entry.stored == GraphStorage.BUNDLE and not bundle_sound:
            out.append(None)
            continue
        if relative_path_problem(entry.json) is not None:
            found.note(
                f"graph {index} ({entry.name}): its JSON {entry.json} lies outside the archive directory, which verify "
                f"does not read from: check it by its own path (foundry verify {entry.json}), or save graphs inside "
                "the archive"
            )
            out.append(None)
            continue
        out.append(read_graph_files(Path(os.path.normpath(directory / entry.json)), found, store))
    return out


def check_consistency(graph: GraphUnderCheck, found: Findings) -> None:
    """What the graph's metadata and manifest entry say against the graph LOAD would build: node count, topology
    key, function and event counts (LOAD's native codec builds from the record, whatever they say)."""
    record = graph.effective
    meta, entry = graph.meta, graph.entry
    check = Check.FILES if graph.delta is None else Check.TEMPLATES
    where = str(graph.json_path)

    def problem(message: str) -> None:
        found.add(check, ProblemKind.MISMATCH, where, f"{graph.label}: {message}")

    if record is None:
        return
    nodes = node_counts(record)["nodes"]
    if entry is not None and nodes != entry.nodes:
        problem(f"the record has {nodes} nodes, the manifest says {entry.nodes}")
    topology = topology_key(record)
    if topology != meta.topology or (entry is not None and topology != entry.topology):
        said = f"the metadata says {meta.topology}" + (f", the manifest {entry.topology}" if entry else "")
        what = "the record's" if graph.delta is None else "its template's with its overrides applied has"
        problem(f"{what} topology key is {topology}; {said}")
    functions = record.function_count if graph.delta is None else graph.delta.function_count
    if functions != len(meta.functions):
        problem(f"the record names {functions} functions, the metadata lists {len(meta.functions)}")
    if record.event_count != meta.events:
        problem(f"the record uses {record.event_count} events, the metadata says {meta.events}")


def check_memory(graph: GraphUnderCheck, found: Findings, seen: set[str]) -> None:
    """The state memory snapshot the graph's metadata names: present, of the recorded size and SHA-256
    (each snapshot once: graphs of one save share it)."""
    memory = graph.meta.memory
    if memory is None or memory.sha256 in seen:
        return
    seen.add(memory.sha256)
    try:
        directory = resolve_archive_dir(graph.json_path, graph.meta)
    except ArchiveError as exc:
        found.add(Check.FILES, kind_of(exc), graph.json_path, f"{graph.label}: {exc}")
        return
    rel = f"{MEMORY_DIR}/{memory.sha256}.bin"
    read_checked(directory / rel, lambda: read_memory(directory, memory.sha256, memory.bytes), found)


def check_variable_files(graph: GraphUnderCheck, found: Findings, seen: set[str]) -> None:
    """The bytes of each module variable the graph carries: present in its archive's store, of the
    recorded size and SHA-256 (each once: graphs sharing an image share them)."""
    try:
        directory = resolve_archive_dir(graph.json_path, graph.meta)
    except ArchiveError as exc:
        found.add(Check.FILES, kind_of(exc), graph.json_path, f"{graph.label}: {exc}")
        return
    for ref in graph.meta.images:
        for v in ref.variables or ():
            if v.sha256 in seen:
                continue
            seen.add(v.sha256)
            rel = f"{MEMORY_DIR}/{v.sha256}.bin"
            read_checked(directory / rel, partial(read_value, directory, v.sha256, v.bytes), found)


def check_listed_values(directory: Path, manifest: Manifest, found: Findings, seen: set[str]) -> None:
    """The bytes of each module variable the manifest lists for its images, which LOAD's start-up writes into them
    once they are loaded (load/variables.py), read as it reads them (each once, as ``check_variable_files``)."""
    for entry in manifest.images:
        for v in entry.variables or ():
            if v.sha256 not in seen:
                seen.add(v.sha256)
                read_checked(directory / MEMORY_DIR / f"{v.sha256}.bin", partial(read_value, directory, v.sha256,
                                                                                 v.bytes), found)  # fmt: skip


def check_documents(directory: Path, manifest: Manifest, key: SigningKey | None, found: Findings) -> None:
    """Every document the manifest lists, read as LOAD reads it (``listed_document``), its refusal reported."""
    for ref in manifest.documents:
        try:
            listed_document(directory, ref, key)
        except ArchiveError as exc:
            found.refuse(Check.FILES, directory / ref.file, exc)
