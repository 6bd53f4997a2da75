"""What start-up reads ahead of LOAD (load/startup.py calls it on a thread of its own, at process start): the
manifest's graphs, checked as ``read_source`` checks them and kept for ``read_sources`` to take once. Those the
manifest stores in its graph bundle with one read of the bundle (``prepare_bundle``), the others, and any the
bundle did not give, one by one from where they are stored (``prepare_sources``). Either way a graph that fails
a check is left out silently: LOAD reads it again and reports the problem where the program asks for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from foundry.archive import (
    Bundle,
    GraphJson,
    Listing,
    Manifest,
    check_listed_json,
    container_payload,
    directory_entries,
    read_bundle,
    stray_files,
    template_path,
)
from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.gate import check_agrees, check_template, graph_meta, graph_store, manifests_read_once, rebuilt_bundles
from foundry.schema import GraphRole
from foundry.storage import real_name, sha256_holding
from foundry.trust import configured_key

from .source import _STATE, GraphSource, _as_named, _read_source, _Sources

__all__ = ["PARALLEL_READ_MIN", "PREPARED_BYTES_MAX", "prepare_bundle", "prepare_sources"]

# Records read ahead at process start (``prepare_sources``) are held until LOAD takes them: at most this
# many bytes of them, so that an archive whose graphs the program never loads costs bounded memory.
PREPARED_BYTES_MAX = 512 << 20
# A record at least this large is read and hashed on a reader thread; a smaller one costs less read here than
# handed over (hashing lets the interpreter lock go only for larger buffers), and an engine's thousands of
# small graphs would only make the threads contend for it.
PARALLEL_READ_MIN = 256 << 10
YIELD_AFTER_S = 0.001  # the longest ``prepare_sources`` works before it lets the program's threads run


def prepare_sources(
    paths: Iterable[str | os.PathLike[str]], readers: int = 0, stop: threading.Event | None = None
) -> int:
    """Reads and checks, ahead of LOAD, the graphs at ``paths`` as ``read_source`` does, records included
    while they fit in ``PREPARED_BYTES_MAX``, for ``read_sources`` to take. A graph that fails a check is
    left out silently: LOAD reads it again and reports the problem where the program asks for it.
    ``readers`` threads, where more than 0, read and checksum the records of ``PARALLEL_READ_MIN`` bytes or
    more while this thread checks the metadata: a large record's read and hash let the interpreter lock go.
    Once ``stop`` is set, no further graph is started (LOAD reads the rest itself). Returns how many were
    prepared."""
    key = configured_key()
    key_id = key.key_id if key is not None else ""
    state = _STATE.get()
    proven: set[int] = set()
    done = 0
    held_since = time.perf_counter()
    pool: ThreadPoolExecutor | None = None  # started at the first record worth a thread
    reads: list[Future[bool]] = []
    scheduled: set[int] = set()  # sources (by id) whose records are read already or on their way
    try:
        with manifests_read_once():
            store = graph_store(key)
            for p in paths:
                if stop is not None and stop.is_set():
                    break
                name = (_as_named(p), key_id)
                with state.lock:
                    if name in state.prepared:
                        continue
                try:
                    src = _read_source(Path(name[0]), key, True, proven, store)
                except (ArchiveError, OSError):
                    continue
                with state.lock:
                    # Reserved from the sizes the checked metadata declares; what the reads give is the same
                    # (a record of another size fails its check, and its source is dropped).
                    pending = (s for s in (src, src.template) if s is not None and id(s) not in scheduled)
                    wanted = [s for s in pending if s._payload is None]
                    size = sum(s.meta.record.bytes for s in wanted if s.meta.record is not None)
                    room = state.prepared_bytes + size <= PREPARED_BYTES_MAX
                    state.prepared[name] = (src, size if room else 0)
                    state.prepared_bytes += size if room else 0
                if room and wanted:
                    scheduled.update(id(s) for s in wanted)
                    if readers > 0 and size >= PARALLEL_READ_MIN:
                        if pool is None:
                            pool = ThreadPoolExecutor(readers, thread_name_prefix="foundry-record-read")
                        reads.append(pool.submit(_read_ahead, state, name, wanted))
                    else:
                        done -= not _read_ahead(state, name, wanted)
                done += 1
                # Python work beside the program's own start-up (an engine builds its model meanwhile): give the
                # interpreter lock back every millisecond or so, so that thousands of graphs do not hold the
                # program up; not after every graph, as each hand-back costs about a graph's own work.
                now = time.perf_counter()
                if now - held_since > YIELD_AFTER_S:
                    time.sleep(0)
                    held_since = time.perf_counter()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return done - sum(not r.result() for r in reads)


def prepare_bundle(archive: Path, manifest: Manifest, stop: threading.Event | None = None) -> int:
    """``prepare_sources`` for the graphs ``manifest`` (the one start-up proved, signed where a key is
    configured) stores in its graph bundle (archive/bundle.py), with one read of the bundle, so that this thread
    lets the interpreter lock go once in all, not several times a graph. Each graph gets the checks
    ``read_source`` makes (``read_graph_json`` and the rest): its JSON hashes to what its manifest entry lists
    before it is decoded, its metadata is validated, agrees with that entry, names this archive and its
    container's header; a member's template is the graph the bundle holds for it. Its record is hashed where
    LOAD first reads it (``GraphSource.read_payload``, on LOAD's reader threads), as a record read from a file
    is. A graph that fails is left to ``prepare_sources``, and so is every graph where the bundle is larger than
    what ``PREPARED_BYTES_MAX`` leaves room for or cannot be laid out. Once ``stop`` is set, no further graph is
    started. Returns how many were prepared."""
    ref = manifest.bundle
    state = _STATE.get()
    with state.lock:
        # The sources keep views of the bundle's one buffer, so an unloaded graph holds all of it: it must fit
        # whole in what prepared records may hold.
        fits = state.prepared_bytes + (ref.bytes if ref is not None else 0) <= PREPARED_BYTES_MAX
    if ref is None or not fits:
        return 0
    bundled = manifest.bundled()
    try:
        bundle = read_bundle(archive, ref.file, ref.bytes, len(bundled), rebuilt_bundles())
    except (ArchiveError, OSError):
        return 0
    present = directory_entries(archive)  # graph files beside the bundle: left to LOAD, which refuses them
    key = configured_key()
    key_id = key.key_id if key is not None else ""
    templates: dict[str, GraphSource] = {}  # by real name, for the members
    done = 0
    # Templates first, so that each member finds the source its template became. No yielding to the program's
    # threads between graphs: this work needs the lock all the same, and a thread that lets it go waits the
    # switch interval (5 ms) to get it back from a thread running Python.
    order = sorted(range(len(bundled)), key=lambda k: manifest.graphs[bundled[k]].role != GraphRole.TEMPLATE)
    with manifests_read_once():
        home = real_name(archive)
        for slot in order:
            if stop is not None and stop.is_set():
                break
            i = bundled[slot]
            name = (_as_named(os.path.normpath(archive / manifest.graphs[i].json)), key_id)
            with state.lock:
                known = state.prepared.get(name)
            if known is not None:  # prepared by an earlier start-up: its members may use it all the same
                if known[0].template is None:
                    templates[real_name(name[0])] = known[0]
                continue
            listing = Listing(archive, manifest, i, bundle.layout, slot, stray_files(manifest.graphs[i].json, present))
            if listing.stray:
                continue
            try:
                src = _bundled_source(Path(name[0]), home, listing, bundle, templates)
            except ArchiveError:
                continue
            size = src.meta.record.bytes if src.meta.record is not None else 0
            with state.lock:
                if state.prepared_bytes + size > PREPARED_BYTES_MAX:
                    break
                state.prepared[name] = (src, size)
                state.prepared_bytes += size
            done += 1
    return done


def _bundled_source(
    json_path: Path, home: str, listing: Listing, bundle: Bundle, templates: dict[str, GraphSource]
) -> GraphSource:
    """A bundled graph from the bundle's bytes (``prepare_bundle``'s checks); ``home``: the archive's real path.
    ``ArchiveError`` for a graph the bundle cannot give."""
    state = _STATE.get()
    entry = listing.entry
    # The JSON's own hash, as ``read_graph_json`` holds it: the manifest must list these very bytes, before they
    # are decoded; the metadata cache is keyed by what was hashed. In pieces that keep the interpreter lock.
    json_bytes = bundle.jsons[listing.slot]
    got = GraphJson(json_bytes, sha256_holding(json_bytes), listing)
    check_listed_json(got)
    digest = got.sha256
    meta = graph_meta(json_path, got, state)
    check_agrees(json_path, listing.archive, listing.manifest, entry, meta)
    container = bundle.containers[listing.slot]
    container_payload(container, json_path, meta, verify=False, source=f"{listing.where}'s container")  # header
    assert meta.record is not None
    archive_dir = Path(home)
    if meta.template is None:
        real = real_name(json_path)
        src = GraphSource(json_path, meta, None, archive_dir, None, digest, None, listing, container)
        with state.lock:
            # One source per template and process, as ``_full_source`` keeps them, where the one read before
            # was parsed from these very bytes; otherwise this one serves the bundle's members alone.
            known = state.full.setdefault((real, meta.record.sha256), src)
        if known.json_sha256 == digest:
            src = known
        templates[real] = src
        return src
    tpath = template_path(json_path, meta)
    template = templates.get(str(tpath))
    if template is None:  # not in the bundle as a sound template (a member of itself is none): LOAD reads it again
        raise ArchiveCorruptError(f"{json_path}: the bundle does not hold its template {tpath} as a sound graph")
    check_template(json_path, meta, tpath, template.meta)
    return GraphSource(json_path, meta, None, archive_dir, template, digest, None, listing, container)


def _read_ahead(state: _Sources, name: tuple[str, str], sources: list[GraphSource]) -> bool:
    """Reads and checks the records of a prepared source (and its template); on any problem the source is
    dropped from the prepared ones, for LOAD to read again and report. Whether it stays."""
    try:
        for s in sources:
            s.read_payload()
        return True
    except (ArchiveError, OSError):
        with state.lock:
            entry = state.prepared.pop(name, None)
            if entry is not None:
                state.prepared_bytes -= entry[1]
        return False
