"""Background loading: every graph replayable early, every graph at full speed later.

``start`` does on the calling thread only what must precede the program's next allocation (read and
check the files, map SAVE's memory), then returns. A loader thread loads the images (read and hashed,
with the records, on a pool of reader threads) and, as soon as a topology group's images are loaded,
has one exec built and instantiated for it on a pool of builder threads (loader.py says how many); the
group is then ready: every member
replays on that exec, switched in by updating only the nodes that vary. The loader then gives each
member an exec of its own, so that steady-state replay pays no update penalty. ctypes releases the
GIL during driver calls, so the loader runs beside the program.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..driver import current_context
from ..errors import CodecError, LoadError
from . import codec
from .load import GraphSource, Occupied, build_exec, check_identity, prepare_memory, read_source
from .loader import run_loader
from .phases import Phases

__all__ = ["GraphHandle", "PendingLoads", "start"]


@dataclass
class Group:
    """Graphs sharing one template: its shared exec and what switching members into it needs."""

    template: GraphSource
    ready: threading.Event = field(default_factory=threading.Event)
    exec: int = 0  # shared exec, instantiated from the template
    graph: int = 0
    nodes: Any = None  # the template graph's top-level node handles
    template_delta: bytes = b""  # the template's own values of every varying node
    template_functions: list[int] = field(default_factory=list)
    current: int = -1  # index of the member whose parameters the shared exec holds; -1: the template's
    switched: int = 0  # how many times members were switched into the shared exec
    fallbacks: int = 0  # switches the driver refused (the member got its own exec on the spot)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class GraphHandle:
    """One loaded graph: replays on its own exec once built, on its group's shared exec before."""

    index: int
    source: GraphSource
    group: Group
    functions: list[int] = field(default_factory=list)
    exec: int = 0  # dedicated exec, 0 until the loader built it
    graph: int = 0

    def launch(self, stream: int) -> None:
        if self.exec:  # set under the group's lock, once, and never unset
            codec.launch(self.exec, stream)
            return
        g = self.group
        wanted = -1 if self.source.template is None else self.index
        with g.lock:
            if self.exec:  # the loader handed this graph its own exec meanwhile
                codec.launch(self.exec, stream)
                return
            if g.current != wanted:
                try:
                    if wanted == -1:
                        codec.apply_overrides(g.exec, True, g.nodes, g.template_delta, g.template_functions)
                    else:
                        codec.apply_overrides(g.exec, True, g.nodes, self.source.payload, self.functions)
                except CodecError:
                    g.fallbacks += 1
                    # The driver refused to switch this exec (a case the template key did not foresee):
                    # the member gets its own exec now instead, and the shared one is left as it was.
                    g.current = -2  # unknown: the next switch re-applies fully
                    self.graph, self.exec = build_exec(self.source, self.functions, g.template_functions)
                    codec.launch(self.exec, stream)
                    return
                g.current = wanted
                g.switched += 1
            codec.launch(g.exec, stream)


class PendingLoads:
    """What start() returns; finish()/finish_one() wait on it."""

    def __init__(self, handles: list[GraphHandle], groups: list[Group]) -> None:
        self.handles = handles
        self.groups = groups
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.timings: dict[str, float] = {}
        self.thread: threading.Thread | None = None
        self.finished: dict[int, Any] = {}  # what the torch layer handed out, by index
        self.dedicated_go = threading.Event()  # the loader builds members' own execs once set
        self.phases = Phases(time.perf_counter())

    def build_dedicated(self) -> None:
        """Lets a loader started with defer_dedicated=True go on to members' own execs."""
        self.dedicated_go.set()

    def wait_group(self, index: int) -> GraphHandle:
        """Graph ``index`` once its group is replayable (raises if the loader failed)."""
        handle = self.handles[index]
        while not handle.group.ready.wait(0.05):
            if self.error is not None or (self.done.is_set() and not handle.group.ready.is_set()):
                break
        if self.error is not None:
            raise LoadError(f"background loading failed: {self.error}") from self.error
        return handle

    def wait_all(self) -> None:
        """Blocks until every graph has its own exec (or the loader failed)."""
        self.done.wait()
        if self.error is not None:
            raise LoadError(f"background loading failed: {self.error}") from self.error


def start(
    paths: Iterable[str | Path],
    num_threads: int = 8,
    allow_mismatch: Iterable[str] = (),
    verify_images: bool = True,
    occupied: Occupied | None = None,
    defer_dedicated: bool = False,
) -> PendingLoads:
    """Checks the archives, restores SAVE's memory, and starts the loader thread.

    With ``defer_dedicated`` the loader stops once every graph is replayable and builds members' own
    execs only after ``build_dedicated()`` (to measure replay on shared execs, or to keep the GPU
    quiet during a latency-critical phase).
    """
    t0 = time.perf_counter()
    # Metadata only: the records are read and checksummed on the loader's pool, beside the images.
    sources = [read_source(p, lazy=True) for p in paths]
    if not sources:
        raise LoadError("start_graph_builds() got no graphs to load")
    t_read = time.perf_counter()
    allow = tuple(allow_mismatch)
    for identity in {s.meta.identity: s for s in sources}.values():
        check_identity(identity.meta, allow)
    t_identity = time.perf_counter()
    prepare_memory(sources, occupied)
    t_memory = time.perf_counter()
    groups: dict[Path, Group] = {}
    handles = []
    for i, src in enumerate(sources):
        template = src.template or src
        key = template.json_path.resolve()
        group = groups.setdefault(key, Group(template))
        handles.append(GraphHandle(i, src, group))
    pending = PendingLoads(handles, list(groups.values()))
    pending.phases.origin = t0
    if not defer_dedicated:
        pending.dedicated_go.set()
    pending.timings.update(
        read_s=t_read - t0, identity_s=t_identity - t_read, memory_s=t_memory - t_identity, prepare_s=t_memory - t0
    )
    pending.thread = threading.Thread(
        target=run_loader,
        args=(pending, current_context(), num_threads, verify_images, t0),
        name="foundry-loader",
        daemon=True,
    )
    pending.thread.start()
    return pending
