"""An archive's graphs and its manifest (docs/FORMAT.md): reading and writing a graph's JSON and container,
the graph bundle that holds many graphs in one file, where each graph's bytes are stored, and the manifest
that lists and binds every file. Bytes only: no process state (the signing key and what was proven signed
live in foundry.trust), no writer of records or deltas (the native codec writes them).

Reads and writes without CUDA, torch or any Foundry native module, so archives can be inspected and checked
on any machine. Every reader raises only ``ArchiveError`` subclasses for bad content:
``ArchiveCorruptError`` (malformed), ``ArchiveVersionError`` (unknown version), ``ArchiveForeignError``
(not a Foundry file).
"""

from __future__ import annotations

from .bundle import BUNDLE_NAME, Bundle, read_bundle, write_bundle
from .graphfile import (
    DeltaFacts,
    GraphFiles,
    MetaCache,
    RecordFacts,
    container_path,
    container_payload,
    graph_files,
    parse_meta,
    record_path,
    resolve_archive_dir,
    template_path,
    write_graph,
)
from .manifest import (
    MANIFEST_NAME,
    Manifest,
    archive_region,
    listed_documents,
    manifest_document,
    now_iso,
    parse_manifest_doc,
    read_manifest,
    write_manifest,
)
from .rankbundle import store_bundle_against, stored_against
from .stored import (
    GraphJson,
    GraphStore,
    Listing,
    check_listed_json,
    directory_entries,
    listed_region,
    manifest_if_any,
    read_graph,
    read_graph_json,
    read_graph_payload,
    read_meta,
    read_meta_digest,
    stray_files,
)

__all__ = [
    "BUNDLE_NAME",
    "MANIFEST_NAME",
    "Bundle",
    "DeltaFacts",
    "GraphFiles",
    "GraphJson",
    "GraphStore",
    "Listing",
    "Manifest",
    "MetaCache",
    "RecordFacts",
    "archive_region",
    "check_listed_json",
    "container_path",
    "container_payload",
    "directory_entries",
    "graph_files",
    "listed_documents",
    "listed_region",
    "manifest_document",
    "manifest_if_any",
    "now_iso",
    "parse_manifest_doc",
    "parse_meta",
    "read_bundle",
    "read_graph",
    "read_graph_json",
    "read_graph_payload",
    "read_manifest",
    "read_meta",
    "read_meta_digest",
    "record_path",
    "resolve_archive_dir",
    "store_bundle_against",
    "stored_against",
    "stray_files",
    "template_path",
    "write_bundle",
    "write_graph",
    "write_manifest",
]
