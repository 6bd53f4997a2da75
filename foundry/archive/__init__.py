"""The Foundry archive, in pure Python (docs/FORMAT.md).

Reads, writes and verifies archives without CUDA, torch or any Foundry native module, so archives
can be inspected and checked on any machine. Every reader raises only ``ArchiveError`` subclasses
for bad content: ``ArchiveCorruptError`` (malformed), ``ArchiveVersionError`` (unknown version),
``ArchiveForeignError`` (not a Foundry file).
"""

from __future__ import annotations

from foundry.archive.atomic import sha256_bytes, sha256_file, write_atomic
from foundry.archive.check import Problem, ProblemKind, check_archive
from foundry.archive.container import ContainerHeader, pack_container, read_container_header, unpack_container
from foundry.archive.delta import DELTA_MAGIC, Delta, encode_delta, override_indices, parse_delta
from foundry.archive.graphfile import (
    container_path,
    read_graph,
    read_meta,
    read_meta_digest,
    read_payload,
    resolve_archive_dir,
    write_graph,
)
from foundry.archive.graphmeta import GRAPH_FORMAT, GRAPH_FORMAT_VERSION, GraphMeta
from foundry.archive.identity import IDENTITY_FIELDS, Identity, Mismatch, compare
from foundry.archive.images import (
    IMAGES_DIR,
    image_path,
    image_relpath,
    open_image,
    read_region_hint,
    write_image,
    write_region_hint,
)
from foundry.archive.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_FORMAT_VERSION,
    MANIFEST_NAME,
    GraphEntry,
    GraphRole,
    Group,
    ImageEntry,
    Manifest,
    now_iso,
    read_manifest,
    write_manifest,
)
from foundry.archive.nodes import (
    PERSISTED_NODE_TYPES,
    ArgMode,
    ChildGraphNode,
    Edge,
    EmptyNode,
    EventNode,
    GraphRecord,
    KernelNode,
    LaunchAttr,
    MemcpyNode,
    MemsetNode,
    Node,
    NodeType,
)
from foundry.archive.record_encode import encode_record
from foundry.archive.record_parse import parse_record
from foundry.archive.record_walk import iter_nodes, kernel_pointer_words, node_counts, topology_key
from foundry.archive.specs import (
    FUNCTION_ATTR_IDS,
    FunctionRef,
    ImageFormat,
    ImageRef,
    MemorySpec,
    OutputSpec,
    RecordRef,
    RegionSpec,
    RngSpec,
    TemplateRef,
)

__all__ = [
    "DELTA_MAGIC",
    "FUNCTION_ATTR_IDS",
    "GRAPH_FORMAT",
    "GRAPH_FORMAT_VERSION",
    "IDENTITY_FIELDS",
    "IMAGES_DIR",
    "MANIFEST_FORMAT",
    "MANIFEST_FORMAT_VERSION",
    "MANIFEST_NAME",
    "PERSISTED_NODE_TYPES",
    "ArgMode",
    "ChildGraphNode",
    "ContainerHeader",
    "Delta",
    "Edge",
    "EmptyNode",
    "EventNode",
    "FunctionRef",
    "GraphEntry",
    "GraphMeta",
    "GraphRecord",
    "GraphRole",
    "Group",
    "Identity",
    "ImageEntry",
    "ImageFormat",
    "ImageRef",
    "KernelNode",
    "LaunchAttr",
    "Manifest",
    "MemcpyNode",
    "MemorySpec",
    "MemsetNode",
    "Mismatch",
    "Node",
    "NodeType",
    "OutputSpec",
    "Problem",
    "ProblemKind",
    "RecordRef",
    "RegionSpec",
    "RngSpec",
    "TemplateRef",
    "check_archive",
    "compare",
    "container_path",
    "encode_delta",
    "encode_record",
    "image_path",
    "image_relpath",
    "iter_nodes",
    "kernel_pointer_words",
    "node_counts",
    "now_iso",
    "open_image",
    "override_indices",
    "pack_container",
    "parse_delta",
    "parse_record",
    "read_container_header",
    "read_graph",
    "read_manifest",
    "read_meta",
    "read_meta_digest",
    "read_payload",
    "read_region_hint",
    "resolve_archive_dir",
    "sha256_bytes",
    "sha256_file",
    "topology_key",
    "unpack_container",
    "write_atomic",
    "write_graph",
    "write_image",
    "write_manifest",
    "write_region_hint",
]
