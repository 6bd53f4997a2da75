"""A topology group as LOAD holds it: the template's shared exec, its graphs, and every transition
between them.

A group becomes ready once its shared exec is built and every member's kernels are known: then each
graph replays on the shared exec, switched in by updating only the nodes that vary (one driver call a
node). Next each member's own graph is built (``build_graph``: host work only, so it is done even while
the program holds back the execs' builds), and later each member gets an exec of its own, instantiated
from that graph (``build_own``; the loader builds first those the program launched), then the template
(``finish_own``), and no graph switches again: an exec whose nodes were updated replays slower
(docs/DESIGN.md). Every change to a group's execs happens under its lock, which ``launch`` switches
under too. A member's graph is built and instantiated under its ``building`` lock: the driver does not
lock a CUgraph against two threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from foundry.errors import CodecError
from foundry.native import codec
from foundry.native.driver import set_current_context

from .build import build_exec, graph_label, member_graph
from .source import GraphSource

__all__ = ["GraphHandle", "Group"]


@dataclass(eq=False)
class GraphHandle:
    """One loaded graph: replays on its own exec once built, on its group's shared exec before."""

    index: int
    source: GraphSource
    group: Group
    functions: list[int] = field(default_factory=list)
    exec: int = 0  # dedicated exec, 0 until the loader built it; set under the group's lock, never unset
    # Its own CUgraph (a member's is built before its exec; a template's is the group's): set under the
    # group's lock, never unset.
    graph: int = 0
    building: threading.Lock = field(default_factory=threading.Lock)  # held while its graph or exec is built

    def launch(self, stream: int) -> None:
        if self.exec:
            codec.launch(self.exec, stream)
        else:
            self.group.launch_shared(self, stream)


@dataclass(eq=False)
class Group:
    """Graphs sharing one template: its shared exec and what switching members into it needs."""

    template: GraphSource
    handles: list[GraphHandle] = field(default_factory=list)
    # Set once the group is replayable (make_ready), or by the loader for every group when it fails: a waiter
    # woken then finds the loader's error (Loader.wait_group).
    ready: threading.Event = field(default_factory=threading.Event)
    exec: int = 0  # shared exec, instantiated from the template
    graph: int = 0
    nodes: codec.NodeHandles | None = None  # the template graph's top-level node handles
    template_delta: bytes = b""  # the template's own values of every varying node
    template_functions: list[int] = field(default_factory=list)
    current: int = -1  # index of the member whose parameters the shared exec holds; -1: the template's
    switched: int = 0  # how many times members were switched into the shared exec
    fallbacks: int = 0  # switches the driver refused (the member got its own exec on the spot)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Told of each member launched on the shared exec before it has its own (the loader builds the execs
    # of the graphs the program uses first); called under the group's lock, so it must only take note.
    on_shared_launch: Callable[[GraphHandle], None] | None = None

    @property
    def members(self) -> list[GraphSource]:
        """The distinct member sources of the group (graphs stored as deltas against its template)."""
        return list({id(h.source): h.source for h in self.handles if h.source.template is not None}.values())

    def build_template(self, functions: list[int]) -> None:
        """Builds the template's graph (a builder thread), keeping its node handles for switching."""
        self.template_functions = functions
        self.graph, self.nodes = codec.build_with_nodes(
            self.template.payload, functions, self.template.node_count, graph_label(self.template)
        )

    def instantiate_shared(self) -> None:
        """Instantiates the shared exec from the template's graph (a builder thread)."""
        self.exec = codec.instantiate_uploaded(self.graph)

    def make_ready(self, member_functions: dict[int, list[int]]) -> None:
        """Records the template's values of every node a member varies, hands each graph its function
        table (``member_functions`` by id of the member's source), and marks the group replayable. Each
        member's delta is checked first, its kernels' parameters included (``codec.check_delta``): a member
        is switched into the shared exec when the program launches it, and a delta the driver must not see
        is refused here, by LOAD, not at that launch."""
        nodes = self.template.node_count
        for src in self.members:
            codec.check_delta(src.payload, nodes, member_functions[id(src)], graph_label(src))
        varying = sorted({i for src in self.members for i in codec.delta_indices(src.payload, nodes)})
        assert self.template.meta.record is not None
        self.template_delta = codec.delta_from_record(self.template.payload, varying, self.template.meta.record.sha256)
        for h in self.handles:
            h.functions = self.template_functions if h.source.template is None else member_functions[id(h.source)]
        self.ready.set()

    def launch_shared(self, handle: GraphHandle, stream: int) -> None:
        """Replays ``handle`` on the shared exec, switching the exec to it first if needed."""
        wanted = -1 if handle.source.template is None else handle.index
        with self.lock:
            if handle.exec:  # the loader handed this graph its own exec meanwhile
                codec.launch(handle.exec, stream)
                return
            if self.current != wanted:
                assert self.nodes is not None
                try:
                    if wanted == -1:
                        codec.apply_overrides(
                            self.exec, True, self.nodes, self.template_delta, self.template_functions,
                            graph_label(self.template),
                        )  # fmt: skip
                    else:
                        codec.apply_overrides(
                            self.exec, True, self.nodes, handle.source.payload, handle.functions,
                            graph_label(handle.source),
                        )  # fmt: skip
                except CodecError:
                    self.fallbacks += 1
                    # The driver refused to switch this exec (a case the template key did not foresee):
                    # the member gets its own exec now instead, and the shared one is left as it was.
                    self.current = -2  # unknown: the next switch re-applies fully
                    graph, handle.exec = build_exec(handle.source, handle.functions, self.template_functions)
                    if handle.graph:  # an exec no longer needs the graph it was instantiated from
                        codec.destroy_graph(graph)
                    else:
                        handle.graph = graph
                    codec.launch(handle.exec, stream)
                    return
                self.current = wanted
                self.switched += 1
            if wanted != -1 and self.on_shared_launch is not None:
                self.on_shared_launch(handle)
            codec.launch(self.exec, stream)

    def build_graph(self, handle: GraphHandle, context: int) -> None:
        """Builds a member's own CUgraph (a builder thread), the first half of its own exec, so that only
        the instantiation is left for later. Nothing if it has a graph or an exec already."""
        with handle.building:
            if handle.graph or handle.exec:
                return
            set_current_context(context)
            graph = member_graph(handle.source, handle.functions, self.template_functions)
            with self.lock:
                if handle.graph or handle.exec:  # a refused switch gave it an exec meanwhile
                    codec.destroy_graph(graph)
                else:
                    handle.graph = graph

    def build_own(self, handle: GraphHandle, context: int) -> bool:
        """Gives one member its own exec (a builder thread), unless it has one already; several threads may
        ask for the same member (the loader asks again for a member the program launched meanwhile), and
        one builds while the others wait for it. Whether this call built it."""
        with handle.building:
            if handle.exec:
                return False
            set_current_context(context)
            built = handle.graph
            graph = built or member_graph(handle.source, handle.functions, self.template_functions)
            try:
                exec_ = codec.instantiate_uploaded(graph)
            except BaseException:
                if not built:
                    codec.destroy_graph(graph)
                raise
            # Handed out under the lock launch_shared() switches under, so that no switch lands in an exec
            # that has become a graph's own.
            with self.lock:
                if handle.exec:  # a refused switch gave it an exec meanwhile
                    codec.destroy_exec(exec_)
                    if not built:
                        codec.destroy_graph(graph)
                    return False
                handle.graph, handle.exec = graph, exec_
                return True

    def finish_own(self, context: int) -> None:
        """Once every member has its own exec (build_own): the template's, then the records dropped."""
        set_current_context(context)
        templates = [h for h in self.handles if h.source.template is None]
        # The shared exec passes to the template only if it still holds exactly the template's values:
        # never switched (an updated exec also replays slower than a fresh one) and no refused switch,
        # which can leave it half updated. Otherwise the template gets a fresh exec, and the shared one is
        # destroyed (the driver lets queued launches finish).
        with self.lock:
            keep_shared = bool(templates) and self.switched == 0 and self.fallbacks == 0
            if keep_shared:
                for h in templates:
                    h.graph, h.exec = self.graph, self.exec
        if not keep_shared:
            fresh = codec.instantiate_uploaded(self.graph) if templates else 0
            with self.lock:
                for h in templates:
                    h.graph, h.exec = self.graph, fresh
                codec.destroy_exec(self.exec)
                self.exec = fresh
                self.current = -1
                if not templates:  # nothing replays the template graph itself
                    codec.destroy_graph(self.graph)
                    self.graph = 0
        # Every graph of the group replays on its own exec now and never switches again: the records
        # (tens of MB for a decoder's 67 graphs) go, and are read again from disk if a later LOAD in
        # this process needs them.
        with self.lock:
            self.template_delta = b""
            sources = {id(s): s for h in self.handles for s in (h.source, h.source.template) if s is not None}
            for src in sources.values():
                src.release_payload()
