"""Small, complete example records and archives, for tests, benchmarks and documentation.

Everything here is deterministic: the same call gives the same bytes. Nothing needs a GPU.
"""

from __future__ import annotations

import dataclasses
import os
import random
import struct
from pathlib import Path
from typing import Any

from foundry.archive import Manifest, write_graph, write_manifest
from foundry.images import ImageFormat
from foundry.records import (
    ArgMode,
    ChildGraphNode,
    GraphRecord,
    KernelNode,
    MemcpyNode,
    MemsetNode,
    Node,
    NodeType,
    node_counts,
    topology_key,
)
from foundry.records.nodes import Edge, EmptyNode, EventNode, LaunchAttr
from foundry.schema import (
    FunctionRef,
    GraphEntry,
    GraphMeta,
    GraphRole,
    Group,
    Identity,
    ImageEntry,
    ImageRef,
    OutputSpec,
    RegionSpec,
    RngSpec,
)
from foundry.storage import sha256_bytes, sha256_file, write_image
from tests.support.encode import encode_record

__all__ = [
    "REGION_BASE",
    "kernel",
    "random_record",
    "sample_identity",
    "sample_meta",
    "sample_record",
    "write_sample_archive",
]

REGION_BASE = 0x7F00_0000_0000
"""Base address of the sample region; sample pointers lie in ``[REGION_BASE, REGION_BASE + 1 GiB)``."""


def _attr_value(*words: int) -> bytes:
    return struct.pack(f"<{len(words)}I", *words).ljust(64, b"\0")


def kernel(
    function_index: int,
    pointers: tuple[int, ...] = (),
    scalars: tuple[int, ...] = (),
    *,
    extra: bool = False,
    cooperative: bool = False,
    cluster: tuple[int, int, int] | None = None,
) -> KernelNode:
    """A kernel node whose arguments are ``pointers`` (8 bytes each) then ``scalars`` (4 bytes
    each), laid out as a C compiler would; ``extra`` stores them as an ``extra`` buffer instead."""
    params: list[tuple[int, int]] = []
    args = bytearray()
    for p in pointers:
        params.append((len(args), 8))
        args += p.to_bytes(8, "little")
    for s in scalars:
        params.append((len(args), 4))
        args += s.to_bytes(4, "little")
    attrs: list[tuple[int, bytes]] = []
    if cooperative:
        attrs.append((LaunchAttr.COOPERATIVE, _attr_value(1)))
    if cluster is not None:
        attrs.append((LaunchAttr.CLUSTER_DIMENSION, _attr_value(*cluster)))
    return KernelNode(
        function_index,
        (64, 2, 1),
        (256, 1, 1),
        1024 * function_index,
        ArgMode.EXTRA if extra else ArgMode.PARAMS,
        () if extra else tuple(params),
        tuple(attrs),
        bytes(args),
    )


def sample_record() -> GraphRecord:
    """A record with every persisted node type, both argument modes, launch attributes, edge data
    and child graphs nested two deep. It uses 3 functions and 2 events."""
    p = REGION_BASE
    inner = GraphRecord((kernel(2, (p + 0x3000,), (5,)), EmptyNode()), (Edge(0, 1),))
    child = GraphRecord(
        (kernel(1, (p + 0x1000, p + 0x2000)), ChildGraphNode(inner), EventNode(NodeType.EVENT_RECORD, 1)),
        (Edge(0, 1), Edge(1, 2)),
    )
    nodes: tuple[Node, ...] = (
        kernel(0, (p, p + 0x100), (7, 9), cooperative=True),
        MemsetNode(p + 0x200, 0, 0xDEADBEEF, 4, 64, 1),
        MemcpyNode(p + 0x300, 0, 0, 0, 256, 1, p + 0x400, 0, 0, 0, 256, 1, 256, 1, 1, 2, 2),
        EventNode(NodeType.WAIT_EVENT, 0),
        ChildGraphNode(child),
        kernel(2, (p + 0x500,), (3,), extra=True, cluster=(2, 1, 1)),
        EmptyNode(),
    )
    edges = (Edge(0, 1), Edge(1, 2), Edge(2, 4), Edge(3, 4), Edge(4, 5, 1, 0, 1), Edge(5, 6))
    return GraphRecord(nodes, edges, function_count=3, event_count=2)


def random_record(seed: int, nodes: int = 1000, functions: int = 50) -> GraphRecord:
    """A chain-like record of ``nodes`` nodes, mostly kernels with 4-12 parameters, for benchmarks."""
    rng = random.Random(seed)
    out: list[Node] = []
    for _ in range(nodes):
        roll = rng.random()
        if roll < 0.85:
            ptrs = tuple(REGION_BASE + 256 * rng.randrange(1 << 20) for _ in range(rng.randrange(2, 8)))
            out.append(kernel(rng.randrange(functions), ptrs, tuple(rng.randrange(1 << 31) for _ in range(4))))
        elif roll < 0.95:
            out.append(MemsetNode(REGION_BASE + 256 * rng.randrange(1 << 20), 0, 0, 4, 1024, 1))
        else:
            out.append(EmptyNode())
    edges = tuple(Edge(i, i + 1) for i in range(nodes - 1))
    return GraphRecord(tuple(out), edges, function_count=functions, event_count=0)


def sample_identity(**changes: Any) -> Identity:
    """An H100-like identity; keyword arguments replace fields."""
    base = Identity("NVIDIA H100 80GB HBM3", 132, (9, 0), 12080, "12.8", "2.7.0", "0.1.0")
    return dataclasses.replace(base, **changes)


def sample_meta(name: str, record: GraphRecord, images: tuple[bytes, ...], archive_dir: str) -> GraphMeta:
    """Metadata for ``record`` whose functions live in ``images`` (function i in image i % len)."""
    refs = tuple(ImageRef(sha256_bytes(im), len(im), ImageFormat.ELF) for im in images)
    functions = tuple(
        FunctionRef(refs[i % len(refs)].sha256, f"_Z6kernel{i}Pf", (0, -1, 0, 0, 0, 0, 0))
        for i in range(record.function_count)
    )
    region = RegionSpec(
        REGION_BASE,
        1 << 30,
        1 << 21,
        0x60_0000,
        ((0, 0x40_0000), (0x40_0000, 0x20_0000)),
        ((1, 1, 0, 0x1000, 0x20_0000), (2, 1, 0x20_0000, 0x1000, 0x20_0000)),
    )
    return GraphMeta(
        name=name,
        foundry_version="0.1.0",
        archive_dir=archive_dir,
        functions=functions,
        images=refs,
        events=record.event_count,
        outputs=(OutputSpec(REGION_BASE + 0x100, (4, 8), (8, 1), "float32", 128),),
        rng=RngSpec(REGION_BASE + 0x10, REGION_BASE + 0x18, 4),
        region=region,
        identity=sample_identity(),
        stats=tuple(node_counts(record).items()),
        topology=topology_key(record),
    )


def write_sample_archive(archive_dir: str | os.PathLike[str]) -> Manifest:
    """Write a complete two-graph archive (one group: template ``graph_0``, member ``graph_1``)
    with two images into ``archive_dir``, and return its manifest."""
    directory = Path(archive_dir)
    directory.mkdir(parents=True, exist_ok=True)
    images = (b"\x7fELF sample image A" * 50, b"\x7fELF sample image B" * 70)
    refs = [write_image(directory, im, ImageFormat.ELF) for im in images]
    base = sample_record()
    entries: list[GraphEntry] = []
    for i in range(2):
        record = base if i == 0 else _with_other_arguments(base)
        meta = write_graph(
            directory / f"graph_{i}.json",
            sample_meta(f"graph_{i}", record, images, "."),
            encode_record(record),
        )
        assert meta.record is not None
        json_sha = sha256_file(directory / f"graph_{i}.json")
        entries.append(
            GraphEntry(
                meta.name,
                f"graph_{i}.json",
                json_sha,
                meta.record.sha256,
                node_counts(record)["nodes"],
                meta.topology,
                0,
                GraphRole.TEMPLATE if i == 0 else GraphRole.MEMBER,
            )
        )
    manifest = Manifest(
        "0.1.0",
        "2025-01-01T00:00:00+00:00",
        sample_identity(),
        sample_meta("x", base, images, ".").region,
        tuple(ImageEntry.from_ref(r) for r in refs),
        tuple(entries),
        (Group(entries[0].topology, 0, (1,), ()),),
    )
    write_manifest(directory, manifest)
    return manifest


def _with_other_arguments(record: GraphRecord) -> GraphRecord:
    """Same topology, different grids and arguments: a group member."""
    nodes = tuple(
        KernelNode(
            n.function_index,
            (128, 1, 1),
            n.block,
            n.shared_mem,
            n.arg_mode,
            n.params,
            n.attrs,
            bytes(b ^ 0x40 for b in n.args),
        )
        if isinstance(n, KernelNode)
        else n
        for n in record.nodes
    )
    return GraphRecord(nodes, record.edges, record.function_count, record.event_count)
