"""The steps of SAVE and LOAD that every engine performs the same way, on the process's Session. An
engine's lifecycle calls them from its own hook points, in this order:

  begin            before anything allocates device memory: LOAD reads the archive's metadata (as the
                   manifest lists it, every value checked), refuses a foreign archive before the GPU is
                   touched, loads the kernel images, sets SAVE's region and points the engine at the
                   archive's caches (caches.py); SAVE refuses an archive directory that is not empty (and
                   caches it cannot pack), and sets the region
  end_phase        at each start-up phase boundary: SAVE records it, LOAD checks it against SAVE's
  start_builds     LOAD, once the weights are in place: Foundry starts building the graphs in the background
  resume_at        LOAD: back to SAVE's cursor at a phase boundary, after Foundry's restore or skipped work
  isolated_phase   a phase after work LOAD skips: at SAVE's cursor, from fresh allocator segments, checked
  past_saved_memory  LOAD, once the phases SAVE recorded are done: later allocations land past SAVE's memory
  save_graphs      SAVE, after the engine captured: graph files, the metadata (and the engine's caches), then
                   the manifest listing them
  load_graphs      LOAD, where the engine would capture: takes each built graph and hands them to the engine
  write_report     the JSON report of the start-up phases, if FOUNDRY_<E>_REPORT asks for one
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from . import caches, tritonkey
from .config import Mode
from .errors import PhaseLayoutError
from .metadata import ArchiveMetadata, Fingerprint, GraphEntry, PhaseMark
from .outputs import as_flat, rebuild, shape_of
from .phases import check_phase, process_started_at
from .ranks import (
    SINGLE,
    Place,
    bundles_to_store,
    check_load_dir,
    check_save_dir,
    nccl_settings,
    report_path,
    share_with_other_ranks,
)
from .session import Session

__all__ = [
    "Captured",
    "begin",
    "end_phase",
    "engine_ready",
    "isolated_phase",
    "load_graphs",
    "past_saved_memory",
    "required",
    "resume_at",
    "save_graphs",
    "start_builds",
    "write_report",
]

Key = dict[str, Any]  # the batch key, as JSON: names and scalar values
Captured = tuple[Key, Any, Any]  # (the engine's batch key, graph, output tensor or tensors)
M = TypeVar("M", bound=ArchiveMetadata)
T = TypeVar("T")


def begin(s: Session[Any, Any], fingerprint: Fingerprint, place: Place = SINGLE) -> None:
    """Runs once the engine picked its device and before anything (NCCL included) allocates device memory;
    ``place`` is this process's rank (ranks.py: each rank saves and loads its own folder of the archive)."""
    top = s.config.require_archive()
    if place.world > 1:
        # Compared before the GPU is touched, like the rest: two rank folders swapped are refused on both ranks,
        # before either creates a communicator the other would wait in.
        fingerprint = Fingerprint((*fingerprint.items, ("rank", f"{place.rank} of {place.world}")))
    s.fingerprint = fingerprint
    s.place = place
    if s.config.mode is Mode.LOAD:
        check_load_dir(top, place, s.config.engine)  # another world's archive: refused before anything is set
    if place.world > 1:
        added = nccl_settings(place, s.config.engine)  # before the first communicator exists
        if added:
            logging.getLogger(s.config.engine.logger or s.config.engine.key).info(
                "Foundry: rank %d of %d runs with %s", place.rank, place.world,
                " ".join(f"{k}={v}" for k, v in added.items()),
            )  # fmt: skip
        s.api.set_rank(place.rank, place.world)  # before any graph is saved or loaded: each records it
    if s.config.mode is Mode.LOAD:
        archive = s.archive
        s.saved = s.metadata.read(archive, s.api)
        s.metadata.check_fingerprint(s.saved.fingerprint, fingerprint, archive)  # before the GPU is touched
        # The caches before the modules: the engine compiles nothing before either, and the modules start threads
        # that read the graphs, whose JSON decoding holds the GIL for up to 0.6 s at a time; the copy, a file
        # system call after another, waited on it (0.65-1.2 s, 0.62 of them beside one decode in the sampled
        # stacks: SGLang, H200, 6fc9062).
        caches.use(s, s.caches)
        tritonkey.prewarm()  # ready before LOAD's warm-up launches the first Triton kernel
        t0 = time.perf_counter()
        s.api.load_modules(archive)
        s.timings["load_modules_s"] = time.perf_counter() - t0
        # Where those seconds went (backend.CALLER_STEPS).
        s.timings.update({f"load_modules_{k}_s": v for k, v in s.api.load_modules_phases().items()})
        s.api.set_region(s.saved.region_base, s.saved.region_size)
    else:
        if s.config.pack_caches:
            caches.prepare_save(s, s.caches)
        check_save_dir(top, place, s.config.engine)
        s.api.set_region(s.config.region_base, s.config.region_size)
    s.tracker.start()


def end_phase(s: Session[Any, Any], name: str, boundary: bool = True) -> PhaseMark:
    """Ends phase ``name``; LOAD checks it against SAVE's (``boundary``: phases.PhaseTracker.mark's)."""
    here = s.tracker.mark(name, boundary)
    if s.config.mode is Mode.LOAD:
        check_phase(s.require_saved().phase(name), here)
    return here


def start_builds(s: Session[Any, Any]) -> None:
    """LOAD: maps SAVE's memory (Foundry checks this process's allocations first) and builds every graph of
    the archive in the background."""
    saved = s.require_saved()
    archive = s.archive
    t0 = time.perf_counter()
    # Wall-clock marks beside the durations: with the loader's own timings (seconds from this start) they tell
    # how long load_graphs waited for the builds and how long it spent on each graph.
    s.timings["start_graph_builds_at"] = time.time()
    paths = [archive / g.json for g in saved.graphs]
    # Members' own execs wait until every graph is in the engine's hands: built beside the engine's thread,
    # they would compete with it for the interpreter lock while it takes thousands of graphs one by one.
    s.pending = s.api.start_builds(paths, s.config.threads, s.config.allow_mismatch, defer_dedicated=True)
    s.timings["start_graph_builds_s"] = time.perf_counter() - t0


def resume_at(s: Session[Any, Any], mark: str) -> None:
    """LOAD: moves the cursor to where SAVE's phase ``mark`` ended, so that the next phase allocates at SAVE's
    offsets (after Foundry's restore moved the cursor past SAVE's memory, or after LOAD skipped work SAVE did
    there). What the allocation log holds since the last boundary belongs to no phase."""
    s.api.set_cursor(s.require_saved().phase(mark).cursor)
    s.tracker.skip()


@contextmanager
def isolated_phase(s: Session[Any, Any], name: str) -> Iterator[None]:
    """Phase ``name``, which follows work LOAD skips: it begins at SAVE's cursor (SAVE marks ``<name>_start``,
    LOAD resumes there) and both runs allocate it from fresh allocator segments (``Session.isolate``), so
    that what the skipped work left cached cannot serve SAVE's tensors. Ends the phase (LOAD checks it)."""
    start = f"{name}_start"
    if s.config.mode is Mode.LOAD:
        resume_at(s, start)
    else:
        s.tracker.mark(start)
    with s.isolate():
        yield
    end_phase(s, name)


def past_saved_memory(s: Session[Any, Any]) -> None:
    """LOAD, after the last phase SAVE recorded: everything allocated from here on lands past SAVE's memory,
    which the loaded graphs use."""
    s.api.set_cursor(max(s.require_saved().high_water, s.api.cursor()))


def _default_name(index: int, key: Key) -> str:
    del key
    return f"g{index:04d}.json"


def save_graphs(
    s: Session[Any, M],
    captured: Sequence[Captured],
    engine_fields: Mapping[str, Any],
    file_name: Callable[[int, Key], str] = _default_name,
    phase: str = "capture",
) -> M:
    """SAVE: writes each captured graph (``file_name(index, key)`` in the archive, the shape of its outputs in
    the metadata: outputs.py), ends ``phase``, writes the engine's metadata (the session's values and
    ``engine_fields``) as an archive document, with FOUNDRY_<E>_PACK_CACHES the engine's caches (caches.py),
    then the manifest, which lists them: the manifest is the
    archive's commit point, so an archive whose SAVE failed has none and LOAD refuses it, and the metadata is
    sealed, hashed (and signed, with a key) with the rest. Set ``s.timings["capture_s"]`` before."""
    archive = s.archive
    fingerprint = required(s, s.fingerprint, "fingerprint")
    t0 = time.perf_counter()
    entries = []
    for i, (key, graph, outputs) in enumerate(captured):
        shape = shape_of(outputs, f"the graph for {key}", s.config.engine)
        path = archive / file_name(i, key)
        s.api.save_graph(graph, path, outputs, archive)
        entries.append(GraphEntry(path.name, tuple(key.items()), _address(outputs), shape))
    s.timings["save_graphs_s"] = time.perf_counter() - t0
    s.tracker.mark(phase)
    meta = s.metadata.kind(
        fingerprint=fingerprint,
        region_base=s.config.region_base,
        region_size=s.config.region_size,
        high_water=s.api.high_water(),
        phases=tuple(s.tracker.marks),
        graphs=tuple(entries),
        timings=tuple({**s.tracker.seconds, **s.timings}.items()),
        **engine_fields,
    )
    s.metadata.write(archive, meta, s.api)
    s.api.save_manifest(archive, documents=[s.metadata.name, *caches.pack(s, s.caches)])
    s.timings["save_s"] = time.perf_counter() - t0  # graph files, metadata and manifest
    s.keeper = caches.keep(s, s.caches, on_packed=lambda: write_report(s, **s.report_fields))
    shared = share_with_other_ranks(archive, s.place)
    log = logging.getLogger(s.config.engine.logger or s.config.engine.key)
    if shared:
        log.info("Foundry save: %.1f MiB of rank %d's files kept once with the other ranks' (hard links)",
                 shared / 2**20, s.place.rank)  # fmt: skip
    for folder, base in bundles_to_store(archive, s.place):
        stored = s.api.store_bundle_against(folder, base)
        if stored:
            log.info("Foundry save: %s's graph bundle stored against %s's, %.1f MiB less", folder.name, base.name,
                     stored / 2**20)  # fmt: skip
    return meta


def engine_ready(s: Session[Any, Any]) -> None:
    """SAVE: the engine's start-up ended (it compiled what its own warm-up compiles): the archive's caches get
    those kernels now, not a second after (caches.Keeper)."""
    if s.keeper is not None:
        s.keeper.flush()


def load_graphs(
    s: Session[Any, Any],
    install: Callable[[list[Captured]], None],
    phase: str = "capture",
    only: Callable[[GraphEntry], bool] | None = None,
) -> list[Captured]:
    """LOAD: waits for each graph ``start_builds`` began (those ``only`` selects, when given), rebuilds its
    outputs in their saved shape, checks they lie where SAVE's did, and hands them all, keyed as SAVE saved
    them, to ``install`` (which puts them where the engine's dispatch looks); then ends ``phase``."""
    saved = s.require_saved()
    t0 = time.perf_counter()
    s.timings.setdefault("graphs_ready_at", time.time())
    loaded: list[Captured] = []
    finishing = 0.0  # in finish_one: waiting for the graph's group, the graph wrapped, its output tensors made
    for i, entry in enumerate(saved.graphs):
        if only is not None and not only(entry):
            continue
        t1 = time.perf_counter()
        graph, flat = s.api.finish_one(s.pending, i)
        finishing += time.perf_counter() - t1
        outputs = rebuild(entry.outputs, as_flat(flat), entry.json)
        if _address(outputs) != entry.output_address:
            raise PhaseLayoutError(
                f"graph {entry.json} writes its output at {_address(outputs):#x} here but {entry.output_address:#x} in "
                "SAVE: the archive's region does not match this run. Run SAVE again."
            )
        loaded.append((entry.key_dict(), graph, outputs))
        s.handed_out.add(i)
    t1 = time.perf_counter()
    install(loaded)
    installing = time.perf_counter() - t1
    if len(s.handed_out) == len(saved.graphs):
        _release_own_execs(s)
    for key, seconds in (("graphs_ready_s", time.perf_counter() - t0), ("graphs_ready_finish_s", finishing),
                         ("graphs_ready_install_s", installing)):  # fmt: skip
        s.timings[key] = s.timings.get(key, 0.0) + seconds
    s.tracker.mark(phase)
    return loaded


def _release_own_execs(s: Session[Any, Any]) -> None:
    """LOAD: lets the background builds go on to each member's own exec (until then members replay on their
    group's shared exec, correct but slower). ``load_graphs`` calls it once every graph is handed out (the
    engines refuse an archive with graphs left over); again, it does nothing. A watcher thread then says in
    the engine's log when every graph has its own exec, or why not, and writes the report again with it."""
    if s.pending is not None and not s.watching:
        s.watching = True
        s.api.build_dedicated(s.pending)
        threading.Thread(target=_watch_builds, args=(s,), name="foundry-builds-watch", daemon=True).start()


BUILDS_SLOW_S = 30.0  # own execs not all built this long after hand-over: said in the engine's log


def _watch_builds(s: Session[Any, Any]) -> None:
    log = logging.getLogger(s.config.engine.logger or s.config.engine.key)
    try:
        if not s.api.wait_builds(s.pending, BUILDS_SLOW_S):
            log.warning(
                "Foundry load: members' own execs are still being built %.0f s after every graph was handed over; "
                "until then they replay on their group's shared exec, with the same results but slower",
                BUILDS_SLOW_S,
            )
            s.api.wait_builds(s.pending)
        error: BaseException | None = None
    except Exception as exc:  # told, not raised: the engine is serving, and every graph still replays
        error = exc
    loader = dict(getattr(s.pending, "timings", None) or {})
    if error is None:
        log.info(
            "Foundry load: every graph has its own exec, %.2f s after start_graph_builds (%d switches of shared "
            "execs before)", loader.get("all_dedicated_s", 0.0), loader.get("switches", 0),
        )  # fmt: skip
    else:
        log.warning(
            "Foundry load: members' own execs were not all built (%s): those graphs replay on their group's shared "
            "exec, with the same results but slower. Report this with the engine's log.", error,
        )  # fmt: skip
    s.timings["own_execs_error"] = str(error) if error is not None else ""
    try:
        write_report(s, **{**s.report_fields, "loader": loader})
    except OSError as exc:  # the report is the user's diagnostics: its loss must not stop the engine
        log.warning("Foundry load: the report could not be written again: %s", exc)


def _address(outputs: Any) -> int:
    """The address of the first tensor of ``outputs`` (depth first), 0 when it holds none."""
    if isinstance(outputs, list | tuple):
        return next((a for a in map(_address, outputs) if a), 0)
    return 0 if outputs is None else int(outputs.data_ptr())


def required(s: Session[Any, Any], value: T | None, what: str) -> T:
    """``value``, which an earlier start-up hook should have recorded; PhaseLayoutError if it did not."""
    if value is None:
        engine = s.config.engine
        raise PhaseLayoutError(
            f"SAVE reached capture without the {what} (a start-up hook did not run): the {engine.name} start-up "
            f"order is not {engine.name} {engine.version}'s. {engine.fallback()}"
        )
    return value


_REPORT_LOCK = threading.Lock()


def write_report(s: Session[Any, Any], **fields: Any) -> None:
    """Writes the JSON report of this process's start-up phases (mode, phases with their cursor, allocation
    count and seconds, timings, then ``fields``) where the config asks; nothing if it does not."""
    s.report_fields = {k: v for k, v in fields.items() if k != "loader"}
    report = s.config.report
    if report is None:
        return
    doc = {
        "mode": s.config.mode.value,
        "process_started_at": process_started_at(),
        "phases": [
            {
                "name": m.name,
                "cursor": m.cursor,
                "allocations": len(m.allocations),
                "seconds": s.tracker.seconds.get(m.name),
                "ended_at": s.tracker.ended_at.get(m.name),
            }
            for m in s.tracker.marks
        ],
        "timings": s.timings,
        **fields,
    }
    if s.config.mode is Mode.LOAD:
        doc["startup_s"] = s.api.startup_seconds()  # where start-up's background seconds went
    elif s.config.mode is Mode.SAVE:
        doc["save_phases_s"] = s.api.save_seconds()  # where SAVE's seconds went
    target = report_path(report, s.place)
    # Whole or not at all (the builds' watcher writes it again from its own thread, and the ranks of one engine
    # start from the same settings, so the same file name): a reader never sees half, and each process writes
    # through a part file of its own.
    try:
        with _REPORT_LOCK:
            target.parent.mkdir(parents=True, exist_ok=True)
            part = target.with_name(f"{target.name}.{os.getpid()}.part")
            part.write_text(json.dumps(doc, indent=1, default=str) + "\n")
            part.replace(target)
    except OSError as e:
        # The report is for the person timing the start-up; the engine it describes goes on serving.
        logging.getLogger(s.config.engine.logger or s.config.engine.key).warning(
            "Foundry: could not write the start-up report %s (%s); the engine goes on", target, e
        )
