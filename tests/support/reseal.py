"""A kernel node of a saved archive edited as a forger would: the graph's record (or, for a template member,
its delta's override) rewritten canonical, and every file that vouches for it written again to match: the
graph's container and sealed JSON, a template's members (their deltas name the template's record by its
SHA-256), the manifest's checksums and the graph bundle (the archive is turned into one that stores its graphs
in their files for the edit, and back). What is left to refuse the edit is what LOAD checks beyond the
archive's own consistency."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from foundry.archive import (
    GraphStore,
    container_path,
    read_graph,
    read_manifest,
    template_path,
    write_graph,
    write_manifest,
)
from foundry.records import KernelNode, parse_delta, parse_record
from foundry.schema import TemplateRef
from foundry.storage import sha256_file
from tests.support.archive_damage import rebundle, unbundle
from tests.support.encode import encode_delta, encode_record

__all__ = ["edit_kernel", "fewer_params", "resize_last_param", "shorten_args"]

KernelEdit = Callable[[KernelNode], KernelNode]


def fewer_params(node: KernelNode) -> KernelNode:
    """The node with its last parameter left out of its table (its argument bytes as they were)."""
    return dataclasses.replace(node, params=node.params[:-1])


def resize_last_param(node: KernelNode, size: int) -> KernelNode:
    """The node with its last parameter ``size`` bytes long, the argument buffer ending with it."""
    offset, _ = node.params[-1]
    return dataclasses.replace(node, params=(*node.params[:-1], (offset, size)), args=node.args[: offset + size])


def shorten_args(node: KernelNode, by: int) -> KernelNode:
    """The node with ``by`` bytes fewer at the end of its argument buffer (an ``extra`` node's whole buffer)."""
    return dataclasses.replace(node, args=node.args[:-by])


def edit_kernel(arch: Path, name: str, index: int, edit: KernelEdit) -> None:
    """Rewrites top-level kernel node ``index`` of graph ``name`` (its delta's override of that node, for a
    member) as ``edit`` returns it, and seals the archive again around it."""
    bundled = read_manifest(arch).bundle is not None
    unbundle(arch)
    json_path = arch / f"{name}.json"
    meta, payload = read_graph(json_path, store=_as_files())
    if meta.template is None:
        record = parse_record(payload)
        nodes = list(record.nodes)
        nodes[index] = _edited(nodes[index], edit)
        written = write_graph(json_path, meta, encode_record(dataclasses.replace(record, nodes=tuple(nodes))))
        assert written.record is not None
        _retarget_members(arch, json_path, written.record.sha256)
    else:
        delta = parse_delta(payload)
        overrides = tuple((i, _edited(n, edit) if i == index else n) for i, n in delta.overrides)
        assert index in dict(overrides), f"{name}'s delta does not override node {index}"
        write_graph(json_path, meta, encode_delta(dataclasses.replace(delta, overrides=overrides)))
    _remanifest(arch)
    if bundled:
        rebundle(arch)


def _as_files() -> GraphStore:
    return GraphStore(lambda directory: None)  # the files as they are, whatever the manifest lists


def _edited(node: object, edit: KernelEdit) -> KernelNode:
    assert isinstance(node, KernelNode), f"not a kernel node: {node}"
    return edit(node)


def _retarget_members(arch: Path, template_json: Path, record_sha256: str) -> None:
    """Every member of the template at ``template_json``, its delta made against the template's new record."""
    for path in sorted(arch.glob("*.json")):
        if path == template_json or path.name == "graph_manifest.json" or not container_path(path).exists():
            continue
        meta, payload = read_graph(path, store=_as_files())
        if meta.template is None or template_path(path, meta).resolve() != template_json.resolve():
            continue
        delta = dataclasses.replace(parse_delta(payload), template_sha256=record_sha256)
        ref = TemplateRef(meta.template.json, record_sha256)
        write_graph(path, dataclasses.replace(meta, template=ref), encode_delta(delta))


def _remanifest(arch: Path) -> None:
    """The manifest's checksums of every graph as its files are now, and a bundle of those files."""
    manifest = read_manifest(arch)
    graphs = []
    for entry in manifest.graphs:
        meta, _ = read_graph(arch / entry.json, store=_as_files())
        assert meta.record is not None
        graphs.append(
            dataclasses.replace(entry, json_sha256=sha256_file(arch / entry.json), record_sha256=meta.record.sha256)
        )
    write_manifest(arch, dataclasses.replace(manifest, graphs=tuple(graphs)))
