"""The files of an archive, byte for byte: bounded reads of regular files, crash-safe writes, paths kept
inside the archive, SHA-256, the content-addressed store (kernel images, memory snapshots, cached files),
the region hint, and the documents a program stores beside its graphs. It knows which file holds what, not
what a graph or the manifest says (foundry.schema, foundry.archive). Readers raise only ``ArchiveError``
subclasses for bad content.
"""

from __future__ import annotations

from .documents import document_ref, listed_document, read_document, write_document
from .files import (
    MEMORY_DIR,
    REGION_HINT,
    TEMP_SUFFIX,
    cache_blob_path,
    image_path,
    inside,
    inside_name,
    memory_path,
    open_image,
    read_memory,
    read_region_hint,
    read_value,
    real_name,
    real_path,
    real_paths_memoized,
    sha256_bytes,
    sha256_holding,
    write_atomic,
    write_atomic_parts,
    write_image,
    write_memory,
    write_region_hint,
)
from .reads import PathLike, file_kind, read_range, read_regular, sha256_file

__all__ = [
    "MEMORY_DIR",
    "REGION_HINT",
    "TEMP_SUFFIX",
    "PathLike",
    "cache_blob_path",
    "document_ref",
    "file_kind",
    "image_path",
    "inside",
    "inside_name",
    "listed_document",
    "memory_path",
    "open_image",
    "read_document",
    "read_memory",
    "read_range",
    "read_region_hint",
    "read_regular",
    "read_value",
    "real_name",
    "real_path",
    "real_paths_memoized",
    "sha256_bytes",
    "sha256_file",
    "sha256_holding",
    "write_atomic",
    "write_atomic_parts",
    "write_document",
    "write_image",
    "write_memory",
    "write_region_hint",
]
