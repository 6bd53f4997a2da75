"""The one interface through which measurements look inside LOAD (the cold-start benchmark,
foundry_bench.probes, which reaches it through the probe surface, foundry.probe): what it asks, answered
with LOAD's own steps, so that no caller reaches into a ``Loader``'s groups and handles. Everything here
is for measuring: it builds extra graphs and execs (destroyed by ``close``), loads images a second time
under another key, and never changes what the ``Loader`` hands out. Timing of replays stays with the
caller (it needs torch's events); build and load times are measured here, around LOAD's own calls.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from foundry import kernels
from foundry.native import codec
from foundry.native.driver import current_context, exec_update, graph_upload, set_current_context
from foundry.records import KernelNode, delta_bytes, delta_header, override_spans, parse_delta
from foundry.schema import OutputSpec
from foundry.storage import open_image

from .build import build_exec, load_images, member_graph_nodes
from .groups import GraphHandle, Group
from .loader import Loader
from .source import read_source, source_images
from .startup import load_images_split

__all__ = [
    "ExecPair",
    "ImageUse",
    "ProbeExec",
    "exec_pairs",
    "group_count",
    "images_used",
    "load_again",
    "load_again_together",
    "member_pairs",
    "next_launch",
    "outputs",
    "rebuild",
    "template_builds",
    "varying_differences",
]


class ProbeExec:
    """An exec built for a measurement: launch it, then ``close`` it (its graph too, if it owns one)."""

    def __init__(self, exec_: int, graph: int = 0) -> None:
        self.exec, self.graph = exec_, graph

    def launch(self, stream: int) -> None:
        codec.launch(self.exec, stream)

    def close(self) -> None:
        if self.exec:
            codec.destroy_exec(self.exec)
        if self.graph:
            codec.destroy_graph(self.graph)
        self.exec = self.graph = 0


def rebuild(json_path: str | Path) -> ProbeExec:
    """The exec LOAD's code builds from the archived graph at ``json_path``, in this process (its images
    loaded first, once per process)."""
    src = read_source(json_path)
    for sha, (directory, _size) in source_images(src).items():
        load_images(directory, [sha])
    graph, exec_ = build_exec(src)
    return ProbeExec(exec_, graph)


@dataclass
class ExecPair:
    """One member of a group, twice: on an exec of its own (``own``: LOAD's later state) and on an exec of
    its template switched to it node by node (``switched``: how it replays before its own exec exists)."""

    nodes: int
    own_build_s: float  # building and instantiating ``own``
    own: ProbeExec
    switched: ProbeExec
    group: Group
    member: GraphHandle
    own_nodes: codec.NodeHandles | None = None  # the top-level nodes of ``own``'s graph

    def switch_own(self, to_template: bool) -> None:
        """Switches ``own`` node by node to the template's values (``to_template``) or back to the
        member's: the same updates as a shared exec's, on an exec instantiated from the member's values."""
        g, m = self.group, self.member
        assert self.own_nodes is not None
        if to_template:
            codec.apply_overrides(self.own.exec, True, self.own_nodes, g.template_delta, g.template_functions)
        else:
            codec.apply_overrides(self.own.exec, True, self.own_nodes, m.source.payload, m.functions)

    def template_exec(self, device_launch: bool = False) -> ProbeExec:
        """A fresh exec instantiated from the group's template graph (the template's own values), for launch
        from the device too where ``device_launch`` (a driver that refuses raises CodecError)."""
        return ProbeExec(codec.instantiate_uploaded(self.group.graph, _flags(device_launch)))

    def switched_device_launch(self, stream: int) -> ProbeExec:
        """``switched`` again, instantiated for launch from the device too (whose exec keeps its launch data
        on the device: updates reach it by cuGraphUpload, done here after the switch)."""
        g, m = self.group, self.member
        assert g.nodes is not None
        e = ProbeExec(codec.instantiate(g.graph, _flags(True)))
        try:
            codec.apply_overrides(e.exec, True, g.nodes, m.source.payload, m.functions)
            graph_upload(e.exec, stream)
        except BaseException:
            e.close()
            raise
        return e

    def own_device_launch(self) -> ProbeExec:
        """The member's own graph instantiated again, for launch from the device too."""
        return ProbeExec(codec.instantiate_uploaded(self.own.graph, _flags(True)))

    def update_own_unchanged(self, fraction: float) -> int:
        """Updates the first ``fraction`` of the member's varying nodes in ``own`` node by node to the values
        they already hold; returns how many. Whether an update that changes nothing slows the exec too."""
        m = self.member
        assert self.own_nodes is not None
        spans = override_spans(m.source.payload)
        picked = [i for i, _, _ in spans[: round(len(spans) * fraction)]]
        codec.apply_overrides(self.own.exec, True, self.own_nodes, _sub_delta(m.source.payload, picked), m.functions)
        return len(picked)

    def own_round_trip(self, indices: list[int]) -> ProbeExec:
        """A fresh exec of the member's own graph whose nodes at ``indices`` were switched to the template's
        values and back to the member's before any launch: it replays the member's values throughout, so any
        slowdown is what real changes leave behind."""
        g, m = self.group, self.member
        assert self.own_nodes is not None
        e = ProbeExec(codec.instantiate_uploaded(self.own.graph))
        try:
            to_template = _sub_delta(g.template_delta, indices)
            codec.apply_overrides(e.exec, True, self.own_nodes, to_template, g.template_functions)
            codec.apply_overrides(e.exec, True, self.own_nodes, _sub_delta(m.source.payload, indices), m.functions)
        except BaseException:
            e.close()
            raise
        return e

    def node_changes(self) -> dict[int, set[str]]:
        """For each node the member varies (template node index): what differs from the template's value,
        of ``function`` (the resolved CUfunction), ``grid``, ``block``, ``shared_mem`` and ``args_size`` for
        kernel nodes (empty: the argument bytes alone), ``{"other_node"}`` for memset/memcpy nodes."""
        g, m = self.group, self.member
        template = dict(parse_delta(g.template_delta).overrides)
        out: dict[int, set[str]] = {}
        for index, node in parse_delta(m.source.payload).overrides:
            t = template.get(index)
            if not isinstance(node, KernelNode) or not isinstance(t, KernelNode):
                out[index] = {"other_node"}
                continue
            changed = {
                "function": m.functions[node.function_index] != g.template_functions[t.function_index],
                "grid": node.grid != t.grid,
                "block": node.block != t.block,
                "shared_mem": node.shared_mem != t.shared_mem,
                "args_size": len(node.args) != len(t.args),
            }
            out[index] = {k for k, v in changed.items() if v}
        return out

    def override_kinds(self) -> dict[str, int]:
        """How the member's varying nodes differ from the template's (``node_changes``), counted: kernel nodes
        whose function, grid, block, dynamic shared memory or argument size differ, those where any of these
        do (``changed``) and those where only the argument bytes do (``args_only``), and memset/memcpy nodes
        (``other_nodes``)."""
        keys = ("function", "grid", "block", "shared_mem", "args_size")
        counts = dict.fromkeys(("varying", *keys, "args_only", "changed", "other_nodes"), 0)
        for what in self.node_changes().values():
            counts["varying"] += 1
            if "other_node" in what:
                counts["other_nodes"] += 1
                continue
            for key in what:
                counts[key] += 1
            counts["changed" if what else "args_only"] += 1
        return counts

    def upload_switched(self, stream: int) -> None:
        """cuGraphUpload of the switched exec again."""
        graph_upload(self.switched.exec, stream)

    def update_switched_whole(self) -> None:
        """Updates the switched exec whole to the member's own graph (cuGraphExecUpdate)."""
        exec_update(self.switched.exec, self.own.graph)

    def switch_times(self) -> dict[str, float]:
        """Host microseconds of real switches of the switched exec (each changes every node that varies):
        to the template's values and back to the member's, whole (cuGraphExecUpdate from the template's
        graph, then the member's own) and node by node (from the records), in that order."""
        g, m = self.group, self.member
        assert g.nodes is not None
        steps = {
            "whole_to_template_us": lambda: exec_update(self.switched.exec, g.graph),
            "whole_to_member_us": lambda: exec_update(self.switched.exec, self.own.graph),
            "nodes_to_template_us": lambda: codec.apply_overrides(
                self.switched.exec, True, g.nodes, g.template_delta, g.template_functions
            ),
            "nodes_to_member_us": lambda: codec.apply_overrides(
                self.switched.exec, True, g.nodes, m.source.payload, m.functions
            ),
        }
        out = {}
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            out[name] = (time.perf_counter() - t0) * 1e6
        return out

    def close(self) -> None:
        self.switched.close()
        self.own.close()


def exec_pairs(loader: Loader, groups: int = 3) -> list[ExecPair]:
    """An ExecPair for the first member of each of the ``groups`` largest groups that have members (the
    loader's groups must be ready)."""
    picked = sorted((g for g in loader.groups if g.members), key=lambda g: -g.template.node_count)[:groups]
    out = []
    for g in picked:
        member = next(h for h in g.handles if h.source.template is not None)
        t0 = time.perf_counter()
        own_graph, own_exec = build_exec(member.source, member.functions, g.template_functions)
        own_s = time.perf_counter() - t0
        own = ProbeExec(own_exec, own_graph)
        out.append(ExecPair(g.template.node_count, own_s, own, _switched(g, member), g, member))
    return out


def member_pairs(loader: Loader) -> Iterator[ExecPair]:
    """An ExecPair for every member of every group (the loader's groups must be ready), one at a time:
    the caller closes each before the next is built. Its ``own`` keeps its graph's node handles, so it
    can be switched too."""
    for g in loader.groups:
        distinct = {id(h.source): h for h in g.handles if h.source.template is not None}
        for member in distinct.values():
            t0 = time.perf_counter()
            graph, nodes = member_graph_nodes(member.source, member.functions, g.template_functions)
            own = ProbeExec(codec.instantiate_uploaded(graph), graph)
            own_s = time.perf_counter() - t0
            yield ExecPair(g.template.node_count, own_s, own, _switched(g, member), g, member, nodes)


def _sub_delta(delta: bytes | bytearray | memoryview, indices: list[int]) -> bytes:
    """The overrides of ``delta`` at template node ``indices`` (those it holds), as a delta of their own."""
    mv = memoryview(delta)
    wanted = set(indices)
    function_count, template_sha256 = delta_header(mv)
    picked = [(i, bytes(mv[a:b])) for i, a, b in override_spans(mv) if i in wanted]
    return delta_bytes(template_sha256, function_count, picked)


def _flags(device_launch: bool) -> int:
    """LOAD's instantiate flags, with launch from the device where asked."""
    flags = int(codec.INSTANTIATE_USE_NODE_PRIORITY)
    return flags | codec.INSTANTIATE_DEVICE_LAUNCH if device_launch else flags


def _switched(g: Group, member: GraphHandle) -> ProbeExec:
    """A fresh exec of ``g``'s template graph with ``member``'s values switched in node by node."""
    switched = codec.instantiate(g.graph)
    assert g.nodes is not None
    codec.apply_overrides(switched, True, g.nodes, member.source.payload, member.functions)
    return ProbeExec(switched)


def varying_differences(loader: Loader) -> list[dict[str, int]]:
    """For each group with members: how many of the nodes that vary in the group differ, byte for byte,
    between graphs launched one after the other in the order of the paths (the template's values, then
    each member's). An upper bound on what a switch between them must change: a node whose function
    index differs may still name the same kernel."""
    out = []
    for g in loader.groups:
        deltas = [g.template_delta] + [h.source.payload for h in g.handles if h.source.template is not None]
        if len(deltas) < 2:
            continue
        nodes = [{i: bytes(memoryview(d)[a:b]) for i, a, b in override_spans(d)} for d in deltas]
        differ = [sum(a.get(i) != b.get(i) for i in a.keys() | b.keys()) for a, b in itertools.pairwise(nodes)]
        out.append({"nodes": g.template.node_count, "varying": len(nodes[0]), "switches": len(differ),
                    "differ_min": min(differ), "differ_max": max(differ)})  # fmt: skip
    return out


def template_builds(loader: Loader, threads: int) -> tuple[int, list[tuple[float, float]]]:
    """Every group's template built and instantiated again on ``threads`` threads: (template nodes in all,
    (build seconds, instantiate seconds) per template). What was built is destroyed."""
    context = current_context()

    def one(g: Group) -> tuple[int, int, float, float]:
        set_current_context(context)
        t0 = time.perf_counter()
        graph, _nodes = codec.build_with_nodes(g.template.payload, g.template_functions, g.template.node_count)
        t1 = time.perf_counter()
        exec_ = codec.instantiate(graph)
        return graph, exec_, t1 - t0, time.perf_counter() - t1

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, loader.groups))
    for graph, exec_, _, _ in results:
        codec.destroy_exec(exec_)
        codec.destroy_graph(graph)
    return sum(g.template.node_count for g in loader.groups), [(b, i) for _, _, b, i in results]


@dataclass(frozen=True)
class ImageUse:
    """An archived image the loader's graphs use: where it is, its size, and the kernels they launch of it."""

    sha256: str
    directory: Path
    size: int
    kernels: tuple[str, ...]


def images_used(loader: Loader) -> list[ImageUse]:
    found: dict[str, tuple[Path, int]] = {}
    names: dict[str, set[str]] = {}
    for h in loader.handles:
        found.update(source_images(h.source))
        for s in (h.source, h.source.template):
            for ref in s.meta.functions if s is not None else ():
                names.setdefault(ref.image, set()).add(ref.name)
    return [ImageUse(sha, d, size, tuple(sorted(names.get(sha, ())))) for sha, (d, size) in found.items()]


def load_again(image: ImageUse) -> tuple[bytes, float, float]:
    """The image loaded into the driver once more, under another registry key, and each of its kernels
    looked up: (its bytes, seconds to load, seconds for the first lookups)."""
    data = open_image(image.directory, image.sha256, False)
    blob = bytes(data)
    t0 = time.perf_counter()
    kernels.load_image("probe-" + image.sha256, data)
    t1 = time.perf_counter()
    for name in image.kernels:
        kernels.loaded_function(kernels.KernelRef("probe-" + image.sha256, name))
    return blob, t1 - t0, time.perf_counter() - t1


def load_again_together(images: list[ImageUse], threads: int, tag: str) -> tuple[float, float]:
    """Every image loaded into the driver once more under keys prefixed ``tag`` (one per call), split by
    size over ``threads`` threads, each loading its share in one native call, then their kernels looked up
    the same way: (wall seconds to load, wall seconds for the lookups). Does the driver load images in
    parallel?"""
    ordered = sorted(images, key=lambda i: -i.size)  # as start-up hands them over: largest first
    blobs = [(f"{tag}-{i.sha256}", open_image(i.directory, i.sha256, False)) for i in ordered]
    context = current_context()
    t0 = time.perf_counter()
    load_images_split(context, blobs, threads)  # start-up's own split
    t1 = time.perf_counter()

    def lookup(share: range) -> None:
        set_current_context(context)
        kernels.loaded_functions([kernels.KernelRef(blobs[k][0], n) for k in share for n in ordered[k].kernels])

    with ThreadPoolExecutor(threads) as pool:
        t2 = time.perf_counter()
        list(pool.map(lookup, [range(i, len(blobs), threads) for i in range(threads)]))
        return t1 - t0, time.perf_counter() - t2


def next_launch(loader: Loader, index: int) -> str:
    """How graph ``index`` (in the order of the paths) would replay now: ``"own"`` on its own exec,
    ``"shared"`` on its group's shared exec as it stands, ``"switch"`` on the shared exec after
    updating the nodes that vary (it holds another graph's values)."""
    handle = loader.handles[index]
    if handle.exec:
        return "own"
    wanted = -1 if handle.source.template is None else handle.index
    with handle.group.lock:
        return "shared" if handle.group.current == wanted else "switch"


def group_count(loader: Loader) -> int:
    return len(loader.groups)


def outputs(loader: Loader) -> list[OutputSpec]:
    """Every loaded graph's outputs, in the order the paths were given."""
    return [o for h in loader.handles for o in h.source.meta.outputs]
