"""The ``files`` check of ``foundry verify``: every file readable, known, and matching its checksum.

Follows the checksums down: manifest -> graph JSON -> ``.cugraph`` (record or delta) -> images ->
state memory, and cross-checks what two files both say (names, record hashes, node counts, topology
keys, function and event counts). A graph's JSON and container are read from where its archive stores them
(foundry.format.stored: its files or the graph bundle), as LOAD reads them. Never raises for archive content;
every defect becomes a Problem.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from foundry._state import ProcessState
from foundry.errors import ArchiveError
from foundry.format import (
    GRAPH_FORMAT,
    MEMORY_DIR,
    GraphEntry,
    GraphMeta,
    GraphStorage,
    GraphStore,
    ImageFormat,
    KernelNames,
    Manifest,
    ModuleVariables,
    bundled_problem,
    detect_format,
    image_relpath,
    inside,
    load_sealed,
    node_counts,
    open_bundle,
    open_image,
    parse_delta,
    parse_record,
    read_graph_payload,
    read_memory,
    read_regular,
    read_value,
    relative_path_problem,
    resolve_archive_dir,
    scan_image,
    sha256_bytes,
    stray_message,
    template_path,
    topology_key,
)

from .findings import Findings, GraphUnderCheck, ImageInfo, kind_of
from .listing import manifest_disagreement
from .report import Check, ProblemKind

__all__ = [
    "check_bundle",
    "check_consistency",
    "check_image_file",
    "check_images_dir",
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


def check_bundle(directory: Path, manifest: Manifest, found: Findings) -> bool:
    """The manifest's graph bundle, where it names one: the file it states, of its size, laid out as SAVE lays
    it out (every byte the header's, the table's or a graph's: format/bundle.py); each graph in it is checked
    with the graph (``read_graph_files``). Whether its graphs can be read. A version-2 manifest's bundle, a
    second copy of graph files that are there too, is not read (LOAD does not read it either): noted."""
    if manifest.stale_bundle is not None:
        found.note(
            f"{directory / manifest.stale_bundle}: a second copy of the graph files, written by an earlier Foundry "
            "(manifest format version 2); LOAD reads the files and ignores it. Save the archive again to store each "
            "graph once."
        )
    ref = manifest.bundle
    if ref is None:
        return True
    shown = directory / ref.file
    if not os.path.lexists(shown):
        found.add(
            Check.FILES,
            ProblemKind.MISSING,
            shown,
            f"the graph bundle is missing, and with it the only copy of {len(manifest.bundled())} graph(s); LOAD "
            "would fail. Copy the archive completely.",
        )
        return False
    count = len(manifest.bundled())
    try:
        st = os.lstat(shown)
        if stat.S_ISREG(st.st_mode) and st.st_size != ref.bytes:  # anything else: open_bundle names what it is
            found.add(
                Check.FILES,
                ProblemKind.CHECKSUM,
                shown,
                f"the graph bundle is {st.st_size} bytes, the manifest says {ref.bytes}: it is truncated, appended to "
                f"or from another save, and its {count} graph(s) cannot be read. Copy the archive again, or save it "
                "again.",
            )
            return False
        open_bundle(directory, ref.file, ref.bytes, count)
    except (ArchiveError, OSError) as exc:
        kind = kind_of(exc) if isinstance(exc, ArchiveError) else ProblemKind.MISSING
        found.add(Check.FILES, kind, shown, f"{exc}; its {count} graph(s) cannot be read")
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
    json_path: Path,
    label: str,
    found: Findings,
    store: GraphStore,
    entry: GraphEntry | None = None,
    signed: bool = False,
) -> GraphUnderCheck | None:
    """Reads and checks one graph from where its archive stores it (``store``: foundry.format.stored, as LOAD
    finds it: its files, or its archive's bundle) against its listing in the manifest beside it (``entry`` in
    archive mode), and parses its record or delta; None when it cannot be read. A JSON whose bytes are not the
    ones listed is not decoded, as LOAD does not decode it; with ``signed`` (a key was given for one graph)
    that is a signature problem, as LOAD under a key refuses it (``ArchiveSignatureError``)."""
    where = str(json_path)

    def problem(kind: ProblemKind, message: str) -> None:
        found.add(Check.FILES, kind, where, f"{label}: {message}")

    try:
        listing = store.listing(json_path)
    except ArchiveError as exc:
        problem(kind_of(exc), str(exc))
        return None
    if listing is not None:
        entry = listing.entry
        if listing.bundle is not None:
            label = f"{label}, stored in {listing.bundle.path.name}"
        if listing.stray:
            problem(ProblemKind.MISMATCH, stray_message(listing))
            return None
    bundled = listing is not None and listing.bundle is not None
    if not bundled and not os.path.lexists(json_path):
        problem(ProblemKind.MISSING, "the graph metadata is missing")
        return None
    try:
        if listing is not None and listing.bundle is not None:
            raw: bytearray = listing.bundle.json(listing.slot)
        else:
            raw = read_regular(json_path, "graph metadata", follow=listing is None)  # a listed one is inside already
    except ArchiveError as exc:
        problem(kind_of(exc), str(exc))
        return None
    digest = sha256_bytes(raw)
    if entry is not None and digest != entry.json_sha256:
        changed = (
            f"{json_path} was changed after the manifest was written: its SHA-256 is {digest}, the manifest says "
            f"{entry.json_sha256} (not read further)"
        )
        if signed:
            found.add(Check.SIGNATURE, ProblemKind.SIGNATURE, where, f"{label}: {changed}")
        else:
            problem(ProblemKind.CHECKSUM, changed)
        return None
    try:
        # A listed JSON is proven by the hash just compared, which covers its seal (as LOAD proves it).
        meta = GraphMeta.from_json(load_sealed(raw, where, GRAPH_FORMAT, proven=listing is not None), where)
        # The paths the metadata names stay inside their roots (checked once here, so that later
        # checks can use them): its archive directory, its template.
        resolve_archive_dir(json_path, meta)
        if meta.template is not None:
            template_path(json_path, meta)
        elsewhere = bundled_problem(json_path, meta, listing)
        if elsewhere:
            problem(ProblemKind.MISMATCH, elsewhere)
            return None
        payload = read_graph_payload(json_path, meta, listing, verify=True)
        graph = GraphUnderCheck(json_path, label, meta, digest, entry=entry)
        if meta.template is not None:
            graph.delta = parse_delta(payload)
        else:
            graph.record = parse_record(payload)
    except ArchiveError as exc:
        found.add(Check.FILES, kind_of(exc), where, f"{label}: {exc}")
        return None
    except OSError as exc:
        problem(ProblemKind.MISSING, f"cannot read the graph record: {exc}")
        return None
    assert meta.record is not None
    if entry is not None:
        if meta.name != entry.name:
            problem(ProblemKind.MISMATCH, f"the metadata names the graph {meta.name!r}")
        if meta.record.sha256 != entry.record_sha256:
            problem(
                ProblemKind.MISMATCH,
                f"record SHA-256 is {meta.record.sha256}, the manifest says {entry.record_sha256}",
            )
    return graph


def read_listed_graphs(
    directory: Path, manifest: Manifest, found: Findings, store: GraphStore, bundle_sound: bool = True
) -> list[GraphUnderCheck | None]:
    """Every graph the manifest lists, read and checked in manifest order (None: unreadable, or saved
    beside the archive rather than in it: nothing is read through a path that leaves the archive). A
    graph listed by a name inside the archive must be a file there: a symbolic link out of the archive,
    dangling or not, is a problem, as LOAD refuses it. Graphs stored in a bundle that is not sound
    (``check_bundle`` reported it) are not read."""
    out: list[GraphUnderCheck | None] = []
    for index, entry in enumerate(manifest.graphs):
        label = f"graph {index} ({entry.name})"
        if entry.stored == GraphStorage.BUNDLE and not bundle_sound:
            out.append(None)
            continue
        try:
            path = inside(directory, entry.json, "graph metadata")
        except ArchiveError as exc:
            if relative_path_problem(entry.json) is None:  # named inside the archive, a link leads out
                found.add(Check.FILES, ProblemKind.CORRUPT, directory / entry.json, f"{label}: {exc}")
                out.append(None)
                continue
            found.note(
                f"{label}: its JSON {entry.json} lies outside the archive directory, which verify does not read "
                f"from: check it by its own path (foundry verify {entry.json}), or save graphs inside the archive"
            )
            out.append(None)
            continue
        # By its name in the archive as listed (not its real path), where readers look the name up.
        graph = read_graph_files(directory / entry.json if entry.stored == GraphStorage.BUNDLE else path, label,
                                 found, store, entry)  # fmt: skip
        if graph is not None:
            problem = manifest_disagreement(manifest, entry, graph.meta)
            if problem:
                found.add(Check.FILES, ProblemKind.MISMATCH, path, f"{label}: the manifest disagrees on {problem}")
        out.append(graph)
    return out


def check_consistency(graph: GraphUnderCheck, found: Findings, archive: Path | None = None) -> None:
    """What the graph's metadata and manifest entry say against the graph LOAD would build: node
    count, topology key, function and event counts; and, for a graph listed by the manifest of
    ``archive``, that its metadata looks for its images in that archive."""
    record = graph.effective
    meta, entry = graph.meta, graph.entry
    check = Check.FILES if graph.delta is None else Check.TEMPLATES
    where = str(graph.json_path)

    def problem(message: str) -> None:
        found.add(check, ProblemKind.MISMATCH, where, f"{graph.label}: {message}")

    if record is not None:
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
    if archive is not None:
        images_at = resolve_archive_dir(graph.json_path, meta)
        try:
            same = images_at.samefile(archive)
        except OSError:
            same = False
        if not same:
            problem(f"the metadata looks for its images in {images_at}, not in this archive {archive}")


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
