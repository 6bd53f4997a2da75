"""The background loader's work (see pending.py for what it hands out): a pipeline of reader
threads (images and records, hashed), one driver thread (image loads and kernel lookups, which the
driver serializes anyway) and builder threads (each group's shared exec, then members' own execs).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..archive import open_image
from ..driver import call
from ..kernels import registry
from . import codec
from .builders import take_builders
from .load import GraphSource, build_exec, resolve_functions, source_images

if TYPE_CHECKING:
    from .pending import Group, PendingLoads
    from .workpool import PriorityPool

__all__ = ["MAX_BUILDERS", "MAX_READERS", "run_loader"]

# Builder threads: past four, threads mostly contend inside the driver. H200 host, 0.6B decoder's 25
# templates on paged-in heaps (the benchmark's build_probe, session 4): 1 thread 0.18 s, 4 threads
# 0.065 s, 8 threads 0.078 s with twice the thread time of 4. builders.py warms this many.
MAX_BUILDERS = 4
# Reader threads: enough to stay ahead of the builders (a record reads and hashes in 1-2 ms); each
# more one takes the GIL from this thread and the builders between its reads.
MAX_READERS = 4


def _plan(pending: PendingLoads) -> tuple[list[GraphSource], dict[str, tuple[Path, int]], dict[int, set[str]]]:
    """The sources to read, group by group in the order groups are wanted (the group of the first
    path first; in a group the template, then its members), the images still to load in that order,
    and, by source, the images it waits for. Group by group, so that the first group is complete
    (and ready) early; the large images every template shares come first either way."""
    sources: dict[int, GraphSource] = {}
    for g in pending.groups:
        sources.setdefault(id(g.template), g.template)
        for h in pending.handles:
            if h.group is g:
                sources.setdefault(id(h.source), h.source)
    order: dict[str, tuple[Path, int]] = {}
    missing: dict[int, set[str]] = {}
    for sid, src in sources.items():
        missing[sid] = set()
        for sha, entry in source_images(src).items():
            if not registry.is_loaded(sha):
                order.setdefault(sha, entry)
                missing[sid].add(sha)
    return list(sources.values()), order, missing


class _Pipeline:
    """One LOAD's work in flight: which function tables exist, which groups still wait for what."""

    def __init__(self, pending: PendingLoads, context: int, builders: PriorityPool) -> None:
        self.pending = pending
        self.context = context
        self.builders = builders
        self.records: dict[int, Future[Any]] = {}  # by id(source): its record read and checked
        self.tables: dict[int, list[int]] = {}  # by id(source): its CUfunction table
        self.futures: list[Future[Any]] = []  # builder work, appended from several threads
        self.group_of: dict[int, Group] = {id(g.template): g for g in pending.groups}
        # Builders run the earliest wanted group's work first: a group's last step, which makes it
        # ready, goes before later groups' builds.
        self.rank = {id(g): i for i, g in enumerate(pending.groups)}
        self.members: dict[int, list[GraphSource]] = {id(g): [] for g in pending.groups}
        for h in pending.handles:
            if h.source.template is not None and id(h.source) not in self.group_of:
                self.group_of[id(h.source)] = h.group
                self.members[id(h.group)].append(h.source)
        # By group: the shared exec and each member's function table, until all are done.
        self.parts_left = {id(g): 1 + len(self.members[id(g)]) for g in pending.groups}
        self._lock = threading.Lock()

    def resolved(self, src: GraphSource) -> None:
        """All images of ``src`` are loaded (called on the loader thread, which thus does all
        function lookups: the driver loads kernels lazily, on lookup, and serializes that)."""
        clock = self.pending.phases.begin()
        self.tables[id(src)] = resolve_functions(src.meta)
        self.pending.phases.add("resolve_functions", clock)
        g = self.group_of[id(src)]
        if src is g.template:
            self.futures.append(self.builders.submit((self.rank[id(g)],), self._build, g))
        else:
            self._part_done(g)

    def _part_done(self, g: Group) -> None:
        with self._lock:
            self.parts_left[id(g)] -= 1
            last = self.parts_left[id(g)] == 0
        if last:
            self.futures.append(self.builders.submit((self.rank[id(g)],), self._finish, g))

    def _build(self, g: Group) -> None:
        """The group's shared exec (a builder thread)."""
        call("cuCtxSetCurrent", self.context)
        ph = self.pending.phases
        clock = ph.begin()
        self.records[id(g.template)].result()
        clock = ph.add("wait_records", clock)
        g.template_functions = self.tables[id(g.template)]
        g.graph, g.nodes = codec.build_with_nodes(g.template.payload, g.template_functions, g.template.node_count)
        clock = ph.add("build", clock)
        g.exec = codec.instantiate(g.graph)
        ph.add("instantiate", clock)
        self._part_done(g)

    def _finish(self, g: Group) -> None:
        """What switching members into the shared exec needs; then the group is ready."""
        ph = self.pending.phases
        clock = ph.begin()
        members = self.members[id(g)]
        for src in members:
            self.records[id(src)].result()
        clock = ph.add("wait_records", clock)
        nodes = g.template.node_count
        varying = sorted({i for src in members for i in codec.delta_indices(src.payload, nodes)})
        g.template_delta = codec.delta_from_record(g.template.payload, varying)
        clock = ph.add("template_delta", clock)
        for h in self.pending.handles:
            if h.group is g:
                h.functions = g.template_functions if h.source.template is None else self.tables[id(h.source)]
        g.ready.set()
        ph.add("ready", clock)

    def wait(self) -> None:
        """Until all builder work is done; work appended meanwhile is waited for too."""
        i = 0
        while i < len(self.futures):
            self.futures[i].result()
            i += 1


def _build_own_execs(pending: PendingLoads, g: Group, context: int) -> None:
    call("cuCtxSetCurrent", context)
    group = [h for h in pending.handles if h.group is g]
    built = {
        h.index: build_exec(h.source, h.functions, g.template_functions)
        for h in group
        if h.source.template is not None and not h.exec
    }
    templates = [h for h in group if h.source.template is None]
    # Execs are handed out under the lock launch() switches under, so that no switch lands in an exec
    # that has become a graph's own. The shared exec passes to the template only if it still holds
    # exactly the template's values: never switched (an updated exec also replays slower than a fresh
    # one: 1.13-1.25x on the H200's decoder graphs) and no refused switch, which can leave it half
    # updated. Otherwise the template gets a fresh exec, and the shared one is destroyed (the driver
    # lets queued launches finish).
    with g.lock:
        for h in group:
            if h.index not in built:
                continue
            if h.exec:  # a refused switch gave it an exec meanwhile
                codec.destroy_exec(built[h.index][1])
                codec.destroy_graph(built[h.index][0])
            else:
                h.graph, h.exec = built[h.index]
        keep_shared = bool(templates) and g.switched == 0 and g.fallbacks == 0
        if keep_shared:
            for h in templates:
                h.graph, h.exec = g.graph, g.exec
    if not keep_shared:
        fresh = codec.instantiate(g.graph) if templates else 0
        with g.lock:
            for h in templates:
                h.graph, h.exec = g.graph, fresh
            codec.destroy_exec(g.exec)
            g.exec = fresh
            g.current = -1
            if not templates:  # nothing replays the template graph itself
                codec.destroy_graph(g.graph)
                g.graph = 0
    # Every graph of the group replays on its own exec now and never switches again: the records
    # (tens of MB for a decoder's 67 graphs) go, and are read again from disk if a later LOAD in this
    # process needs them.
    with g.lock:
        g.template_delta = b""
        for src in {id(s): s for h in group for s in (h.source, h.source.template) if s is not None}.values():
            src.release_payload()


def _phase_totals(pending: PendingLoads) -> None:
    ph = pending.phases
    pending.timings.update({f"thread_{k}_s": v for k, v in ph.seconds.items()})
    pending.timings.update({f"faults_{k}": v for k, v in ph.faults.items()})


def run_loader(pending: PendingLoads, context: int, num_threads: int, verify: bool, start: float) -> None:
    """A pipeline. Reader threads hash images and records ahead; this thread loads the images into
    the driver one after another (the driver serializes module loads: contending threads only slow
    each other) and looks up each graph's kernels once its images are in; a group's shared exec is
    built on a builder thread as soon as its template's kernels are known, while later images
    still load, and the group is ready once its members' kernels are known too."""
    try:
        call("cuCtxSetCurrent", context)
        ph = pending.phases
        sources, order, missing = _plan(pending)
        waiting: dict[str, list[GraphSource]] = {}
        for src in sources:
            for sha in missing[id(src)]:
                waiting.setdefault(sha, []).append(src)

        def read_image(sha: str, directory: Path) -> bytearray:
            t = ph.begin()
            data = open_image(directory, sha, verify)
            ph.add("image_read", t)
            return data

        def read_record(src: GraphSource) -> None:
            t = ph.begin()
            src.read_payload()
            ph.add("record_read", t)

        with (
            take_builders(max(1, min(num_threads, MAX_BUILDERS))) as crew,
            ThreadPoolExecutor(max(1, min(num_threads, MAX_READERS)), thread_name_prefix="foundry-read") as readers,
        ):
            builders = crew.pool
            work = _Pipeline(pending, context, builders)
            # The first group's template goes first, alone: its build then starts before the other
            # reads compete with this thread for the GIL (which delayed it by 10-15 ms on the H200).
            first, rest = sources[0], sources[1:]
            work.records[id(first)] = readers.submit(read_record, first)
            if not missing[id(first)]:
                work.resolved(first)
            images = {sha: readers.submit(read_image, sha, d) for sha, (d, _size) in order.items()}
            work.records.update({id(src): readers.submit(read_record, src) for src in rest})
            for src in rest:
                if not missing[id(src)]:
                    work.resolved(src)
            for sha, future in images.items():
                data = future.result()
                t = ph.begin()
                registry.load_image(sha, data)
                ph.add("image_driver_load", t)
                for src in waiting.get(sha, ()):
                    missing[id(src)].discard(sha)
                    if not missing[id(src)]:
                        work.resolved(src)
            pending.timings["images_s"] = time.perf_counter() - start
            work.wait()
            pending.timings["all_replayable_s"] = time.perf_counter() - start
            _phase_totals(pending)  # as of all replayable; again below with the own execs' work
            pending.dedicated_go.wait()
            pending.timings["dedicated_start_s"] = time.perf_counter() - start
            builders.map((len(pending.groups),), lambda g: _build_own_execs(pending, g, context), pending.groups)
        pending.timings["all_dedicated_s"] = time.perf_counter() - start
        pending.timings["switches"] = sum(g.switched for g in pending.groups)
        pending.timings["switch_fallbacks"] = sum(g.fallbacks for g in pending.groups)
        _phase_totals(pending)
    except BaseException as exc:  # reported to whoever waits
        pending.error = exc
    finally:
        pending.done.set()
