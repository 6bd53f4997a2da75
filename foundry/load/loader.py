"""Background LOAD: every graph replayable early, every graph at full speed later.

``Loader.start`` does on the calling thread only what must precede the program's next allocation
(read and check the files, map SAVE's memory), then returns. Its thread then runs a pipeline: reader
threads read and hash images and records; the loader thread loads the images into the driver one
after another (the driver serializes module loads: contending threads only slow each other) and looks
up each graph's kernels once its images are in; builder threads (threads.py) build each group's
shared exec as soon as its template's kernels are known, and the group is ready once its members'
kernels are known too. Then, while the program holds the execs' builds back, each member's own graph is
built (host work only), and then each graph gets its own exec. ctypes releases the GIL during driver
calls, so the loader runs beside the program.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from foundry import kernels
from foundry.errors import LoadError
from foundry.native.driver import current_context, set_current_context
from foundry.storage import open_image
from foundry.timing import Phases

from .build import Occupied, check_identity, prepare_memory, resolve_functions
from .groups import GraphHandle, Group
from .source import GraphSource, read_sources, source_images
from .startup import wait_for_startup
from .threads import LIMITS, PriorityPool, take_builders
from .variables import write_source_variables

__all__ = ["Loader"]


class Loader:
    """One background LOAD: its groups and graph handles, its thread, and how long each step took
    (``timings``, ``phases``). ``wait_group``/``wait_all`` wait on it."""

    def __init__(self, sources: list[GraphSource], defer_dedicated: bool) -> None:
        # By template source: read_source hands out one source per template file and record (its process
        # cache), so the same template object means the same group.
        groups: dict[int, Group] = {}
        self.handles: list[GraphHandle] = []
        for i, src in enumerate(sources):
            template = src.template or src
            group = groups.get(id(template))
            if group is None:
                group = groups[id(template)] = Group(template)
            handle = GraphHandle(i, src, group)
            group.handles.append(handle)
            self.handles.append(handle)
        self.groups = list(groups.values())
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.timings: dict[str, float] = {}
        self.thread: threading.Thread | None = None
        self.dedicated_go = threading.Event()  # the loader builds members' own execs once set
        # The members' graphs are built as far as they will be before the execs' builds (every one, unless
        # the program let the builds go first), or the loader failed.
        self.graphs_built = threading.Event()
        # Members launched on their group's shared exec, by handle index, in the order of their first such
        # launch: their own execs are built first. While the own execs are being built, such a launch
        # also asks for its member's at once (``_builds``: the builder pool, None outside that phase).
        self.demand: dict[int, int] = {}
        self._demand_lock = threading.Lock()
        self._builds: tuple[PriorityPool, int] | None = None
        self.own_order: list[int] = []  # handle indices, in the order members got their own execs
        self.own_at: dict[int, float] = {}  # by handle index: when (perf_counter) its own exec was handed over
        for g in self.groups:
            g.on_shared_launch = self._launched_shared
        if not defer_dedicated:
            self.dedicated_go.set()
        self.phases = Phases()

    @classmethod
    def start(
        cls,
        paths: Iterable[str | Path],
        num_threads: int = 8,
        allow_mismatch: Iterable[str] = (),
        verify_images: bool = True,
        occupied: Occupied | None = None,
        defer_dedicated: bool = False,
    ) -> Loader:
        """Checks the archives, restores SAVE's memory, and starts the loader thread.

        With ``defer_dedicated`` the loader stops once every graph is replayable and its members' own
        graphs are built (host work only, done while it waits), and instantiates members' own execs only
        after ``build_dedicated()`` (to measure replay on shared execs, or to keep the GPU quiet during a
        latency-critical phase).
        """
        t0 = time.perf_counter()
        # load_cuda_modules_and_libraries' background work (its error, if it failed); the graphs it has not read
        # yet, read_sources reads on this thread.
        wait_for_startup(take_graphs=True)
        t_startup = time.perf_counter()
        # Metadata only: the records are read and checksummed on the loader's pool, beside the images.
        counts: dict[str, int] = {}
        sources = read_sources(paths, lazy=True, counts=counts)
        if not sources:
            raise LoadError("start_graph_builds() got no graphs to load")
        t_read = time.perf_counter()
        allow = tuple(allow_mismatch)
        for src in {s.meta.identity: s for s in reversed(sources)}.values():  # each first graph so saved
            check_identity(src.meta, allow)
        t_identity = time.perf_counter()
        prepare_memory(sources, occupied)
        t_memory = time.perf_counter()
        loader = cls(sources, defer_dedicated)
        loader.phases.reset(t0)
        loader.timings.update(
            startup_wait_s=t_startup - t0,
            read_s=t_read - t_startup,
            identity_s=t_identity - t_read,
            memory_s=t_memory - t_identity,
            prepare_s=t_memory - t0,
            graphs_read_ahead=counts["read_ahead"],
            graphs_read_here=counts["read_here"],
        )
        loader.thread = threading.Thread(
            target=loader._run,
            args=(current_context(), num_threads, verify_images, t0),
            name="foundry-loader",
            daemon=True,
        )
        loader.thread.start()
        return loader

    def build_dedicated(self) -> None:
        """Lets a loader started with defer_dedicated=True go on to members' own execs."""
        self.dedicated_go.set()

    def wait_group(self, index: int) -> GraphHandle:
        """Graph ``index`` once its group is replayable (raises if the loader failed)."""
        handle = self.handles[index]
        handle.group.ready.wait()  # set by the loader for every group when it fails, after ``error``
        if self.error is not None:
            raise LoadError(f"background loading failed: {self.error}") from self.error
        return handle

    def wait_graphs(self, timeout: float | None = None) -> bool:
        """Blocks until the members' own graphs are built as far as they are before the execs' builds (with
        ``defer_dedicated`` and no ``build_dedicated()`` yet: every one, so that only instantiations are
        left), raising if the loader failed, or until ``timeout`` seconds pass; whether that happened."""
        if not self.graphs_built.wait(timeout):
            return False
        if self.error is not None:
            raise LoadError(f"background loading failed: {self.error}") from self.error
        return True

    def wait_all(self, timeout: float | None = None) -> bool:
        """Blocks until every graph has its own exec (or the loader failed, which raises), or ``timeout``
        seconds pass; whether the builds are done. Refused while the own execs are held back
        (``defer_dedicated`` and no ``build_dedicated()``): nothing would end the wait."""
        if not self.dedicated_go.is_set() and not self.done.is_set():
            raise LoadError(
                "wait_all() would wait forever: this load was started with defer_dedicated=True, so the graphs' "
                "own executable graphs are not built until pending.build_dedicated() is called; call it first"
            )
        if not self.done.wait(timeout):
            return False
        if self.error is not None:
            raise LoadError(f"background loading failed: {self.error}") from self.error
        return True

    # ------------------------------------------------------------------ the loader thread
    def _run(self, context: int, num_threads: int, verify: bool, start: float) -> None:
        try:
            set_current_context(context)
            builders = max(1, min(num_threads, LIMITS.builders))
            readers_n = max(1, min(num_threads, LIMITS.readers))
            with (
                take_builders(builders) as crew,
                ThreadPoolExecutor(readers_n, thread_name_prefix="foundry-read") as readers,
            ):
                _Pipeline(self, context, crew.pool).run(readers, verify)
                self.timings["images_s"] = self.timings.pop("images_at") - start
                self.timings["all_replayable_s"] = time.perf_counter() - start
                self._phase_totals()  # as of all replayable; again below with the own execs' work
                if self._build_member_graphs(crew.pool, context):
                    self.timings["member_graphs_s"] = time.perf_counter() - start
                self.graphs_built.set()
                self.dedicated_go.wait()
                self.timings["dedicated_start_s"] = time.perf_counter() - start
                self._build_own_execs(crew.pool, context)
            self.timings["all_dedicated_s"] = time.perf_counter() - start
            self.timings["switches"] = sum(g.switched for g in self.groups)
            self.timings["members_launched_shared"] = len(self.demand)
            self.timings["switch_fallbacks"] = sum(g.fallbacks for g in self.groups)
            self._phase_totals()
        except BaseException as exc:  # reported to whoever waits
            self.error = exc
        finally:
            for g in self.groups:  # wakes every wait_group(), which then raises ``error`` if the loader failed
                g.ready.set()
            self.graphs_built.set()
            self.done.set()

    def _launched_shared(self, handle: GraphHandle) -> None:
        """A member replayed on its group's shared exec, before it has its own (under the group's lock)."""
        with self._demand_lock:  # held while submitting: the pool outlives _builds
            if handle.index in self.demand:
                return
            self.demand[handle.index] = len(self.demand)
            if self._builds is not None:
                pool, context = self._builds
                pool.submit((0, self.demand[handle.index]), self._build_own, handle, context)

    def _build_own(self, handle: GraphHandle, context: int) -> None:
        if handle.group.build_own(handle, context):
            with self._demand_lock:
                self.own_order.append(handle.index)
                self.own_at[handle.index] = time.perf_counter()

    def _members_in_order(self) -> list[GraphHandle]:
        """Members, those the program launched on a shared exec first (in the order it first did), then
        the rest in the order their paths were given."""
        members = [h for h in self.handles if h.source.template is not None]
        with self._demand_lock:
            demand = dict(self.demand)
        members.sort(key=lambda h: (0, demand[h.index]) if h.index in demand else (1, h.index))
        return members

    def _build_member_graphs(self, pool: PriorityPool, context: int) -> bool:
        """Members' own graphs (the first half of their own execs, about half the cost) while the program
        holds the execs' builds back (``defer_dedicated``): host work, so that what is left once the builds
        are let go is instantiation only. Once they are let go, or if they never were held, the graphs not
        started yet are left to the own execs' builds, which go in the order the program launched members
        (a member waiting for its own exec should not wait for other members' graphs). Whether every
        member's graph was built here."""
        if self.dedicated_go.is_set():
            return False
        members = self._members_in_order()
        futures = [pool.submit((1, rank), h.group.build_graph, h, context) for rank, h in enumerate(members)]
        for f in futures:
            if self.dedicated_go.is_set():
                break
            f.result()
        cut = [f.cancel() for f in futures]
        for f, cancelled in zip(futures, cut, strict=True):
            if not cancelled:
                f.result()  # one a builder took already: done, or its error raised
        return not any(cut)

    def _build_own_execs(self, pool: PriorityPool, context: int) -> None:
        """Every member's own exec, first those the program launched (in the order it first did), then
        the rest in the order their paths were given; then each group's template exec. The first replay
        of a member before its own exec exists runs on the switched shared exec, slower (docs/DESIGN.md):
        the graphs a program uses first are the first to leave it."""
        with self._demand_lock:
            self._builds = (pool, context)
        members = self._members_in_order()
        futures = [pool.submit((1, rank), self._build_own, h, context) for rank, h in enumerate(members)]
        try:
            for f in futures:
                f.result()
        finally:
            with self._demand_lock:
                self._builds = None
        pool.map((2,), lambda g: g.finish_own(context), self.groups)

    def _phase_totals(self) -> None:
        self.timings.update({f"thread_{k}_s": v for k, v in self.phases.seconds.items()})
        self.timings.update({f"faults_{k}": v for k, v in self.phases.faults.items()})


class _Pipeline:
    """One LOAD's work in flight: which function tables exist, which groups still wait for what."""

    def __init__(self, loader: Loader, context: int, builders: PriorityPool) -> None:
        self.loader = loader
        self.phases = loader.phases
        self.context = context
        self.builders = builders
        self.records: dict[int, Future[Any]] = {}  # by id(source): its record read and checked
        self.tables: dict[int, list[int]] = {}  # by id(source): its CUfunction table
        self.futures: list[Future[Any]] = []  # builder work, appended from several threads
        self.group_of: dict[int, Group] = {id(g.template): g for g in loader.groups}
        for g in loader.groups:
            for src in g.members:
                self.group_of[id(src)] = g
        # Builders run the earliest wanted group's work first: a group's last step, which makes it
        # ready, goes before later groups' builds.
        self.rank = {id(g): i for i, g in enumerate(loader.groups)}
        # By group: the shared exec and each member's function table, until all are done.
        self.parts_left = {id(g): 1 + len(g.members) for g in loader.groups}
        self._lock = threading.Lock()

    def plan(self) -> tuple[list[GraphSource], dict[str, tuple[Path, int]], dict[int, set[str]]]:
        """The sources to read, group by group in the order groups are wanted (the group of the first
        path first; in a group the template, then its members), the images still to load in that
        order, and, by source, the images it waits for. Group by group, so that the first group is
        complete (and ready) early; the large images every template shares come first either way."""
        sources: dict[int, GraphSource] = {}
        for g in self.loader.groups:
            sources.setdefault(id(g.template), g.template)
            for h in g.handles:
                sources.setdefault(id(h.source), h.source)
        order: dict[str, tuple[Path, int]] = {}
        missing: dict[int, set[str]] = {}
        for sid, src in sources.items():
            missing[sid] = set()
            for sha, entry in source_images(src).items():
                if not kernels.is_loaded(sha):
                    order.setdefault(sha, entry)
                    missing[sid].add(sha)
        return list(sources.values()), order, missing

    def run(self, readers: ThreadPoolExecutor, verify: bool) -> None:
        """Reads, loads and resolves everything; returns once every group is ready."""
        sources, order, missing = self.plan()
        waiting: dict[str, list[GraphSource]] = {}
        for src in sources:
            for sha in missing[id(src)]:
                waiting.setdefault(sha, []).append(src)

        def read_image(sha: str, directory: Path, size: int) -> bytearray:
            with self.phases.span("image_read"):
                return open_image(directory, sha, verify, size)

        def read_record(src: GraphSource) -> None:
            with self.phases.span("record_read"):
                src.read_payload()

        # The first group's template goes first, alone: its build then starts before the other
        # reads compete with this thread for the GIL (docs/DESIGN.md has what that costs).
        first, rest = sources[0], sources[1:]
        self.records[id(first)] = readers.submit(read_record, first)
        if not missing[id(first)]:
            self.resolved(first)
        images = {sha: readers.submit(read_image, sha, d, size) for sha, (d, size) in order.items()}
        self.records.update({id(src): readers.submit(read_record, src) for src in rest})
        for src in rest:
            if not missing[id(src)]:
                self.resolved(src)
        for sha, future in images.items():
            data = future.result()
            with self.phases.span("image_driver_load"):
                kernels.load_image(sha, data)
            for src in waiting.get(sha, ()):
                missing[id(src)].discard(sha)
                if not missing[id(src)]:
                    self.resolved(src)
        self.loader.timings["images_at"] = time.perf_counter()
        self.wait()

    def resolved(self, src: GraphSource) -> None:
        """All images of ``src`` are loaded (called on the loader thread, which thus does all
        function lookups: the driver loads kernels lazily, on lookup, and serializes that). Their module
        variables are written here, before the group's first build: also for images loaded before
        this LOAD, which the image loop skips."""
        with self.phases.span("variables"):
            write_source_variables(src)
        with self.phases.span("resolve_functions"):
            self.tables[id(src)] = resolve_functions(src.meta)
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
        set_current_context(self.context)
        with self.phases.span("wait_records"):
            self.records[id(g.template)].result()
        with self.phases.span("build"):
            g.build_template(self.tables[id(g.template)])
        with self.phases.span("instantiate"):
            g.instantiate_shared()
        self._part_done(g)

    def _finish(self, g: Group) -> None:
        """What switching members into the shared exec needs; then the group is ready."""
        with self.phases.span("wait_records"):
            for src in g.members:
                self.records[id(src)].result()
        with self.phases.span("ready"):
            g.make_ready(self.tables)

    def wait(self) -> None:
        """Until all builder work is done; work appended meanwhile is waited for too."""
        i = 0
        while i < len(self.futures):
            self.futures[i].result()
            i += 1
