"""Documents: sealed JSON objects an archive carries for a program that reads it (an engine plugin's metadata,
``<engine>_plugin.json``), each listed in the manifest by file name, size and SHA-256 (docs/FORMAT.md,
"Documents"), so that the manifest's seal and signature cover them like every other file.

Foundry knows nothing of a document's content: it is a JSON object, sealed as every archive JSON file is
(``seal``), at most ``MAX_DOCUMENT_BYTES``, in the archive directory itself. The program that wrote it checks
what it says. Pure bytes: no CUDA, no torch, no process state.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from foundry.schema import RecordRef
from foundry.schema.jsondocs import load_sealed, seal
from foundry.schema.jsonfields import At, relative_path_problem

from .files import REGION_HINT, inside, read_stored, sha256_bytes, write_atomic
from .reads import PathLike, read_regular

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "document_name_problem",
    "document_ref",
    "listed_document",
    "read_document",
    "write_document",
]

MAX_DOCUMENT_BYTES = 64 << 20
"""Bound on a document: a reader refuses a listing of more before it reads a byte. An engine's metadata for
thousands of graphs is a few MiB."""
# Foundry's own JSON files at the archive's top (the first is manifest.MANIFEST_NAME, which imports this module).
_RESERVED = frozenset({"graph_manifest.json", REGION_HINT})


def listed_document(value: Any, at: At) -> RecordRef:
    """One entry of the manifest's ``documents`` (``{"file", "bytes", "sha256"}``, as the bundle's), its name and
    size within the rules; ``ArchiveCorruptError`` names the key otherwise."""
    ref = RecordRef.from_json(value, at)
    problem = document_name_problem(ref.file)
    if problem:
        at.key("file").fail(f"{ref.file!r:.120} {problem}")
    if ref.bytes > MAX_DOCUMENT_BYTES:
        at.key("bytes").fail(f"{ref.bytes} is more than the {MAX_DOCUMENT_BYTES} bytes a reader takes")
    return ref


def document_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a document, or None: a document is a ``.json`` file directly in the archive
    directory, other than Foundry's own manifest and region hint."""
    problem = relative_path_problem(name, bare=True)
    if problem:
        return problem
    if "/" in name or not name.endswith(".json") or name.startswith("."):
        return "is not the name of a .json file in the archive directory"
    if name in _RESERVED:
        return "is one of Foundry's own files"
    return None


def _checked_name(name: str) -> str:
    problem = document_name_problem(name)
    if problem:
        raise ValueError(f"document name {name!r:.120} {problem}")
    return name


def write_document(archive_dir: PathLike, name: str, doc: Mapping[str, Any]) -> RecordRef:
    """Writes ``doc`` (a JSON object, without a ``digest`` key) sealed as ``archive_dir/name``, atomically
    and without fsync (``save_graph_manifest`` makes it durable with the rest before its manifest lists it);
    returns what the manifest lists of it. A bad name, a document that is not a JSON object (NaN included),
    or one of more than ``MAX_DOCUMENT_BYTES`` raises ``ValueError`` and nothing is written."""
    _checked_name(name)
    if not isinstance(doc, Mapping):
        raise ValueError(f"document {name!r} must be a JSON object, not a {type(doc).__name__}")
    try:
        data = seal(dict(doc))
    except TypeError as exc:  # a value JSON cannot hold
        raise ValueError(f"document {name!r} is not JSON: {exc}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"document {name!r} is {len(data)} bytes, more than the {MAX_DOCUMENT_BYTES} a reader takes")
    directory = Path(archive_dir)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / name, data, durable=False)
    return RecordRef(name, len(data), sha256_bytes(data))


def document_ref(archive_dir: PathLike, name: str) -> RecordRef:
    """What the manifest lists of document ``archive_dir/name`` as it is now, once it is proven a sealed JSON
    object of at most ``MAX_DOCUMENT_BYTES`` in the archive directory (SAVE lists nothing LOAD would refuse).
    ``ValueError`` for a bad name; ``ArchiveCorruptError`` names the file otherwise."""
    _checked_name(name)
    path = inside(archive_dir, name, "document")
    data = read_regular(path, "document", limit=MAX_DOCUMENT_BYTES)
    load_sealed(data, str(Path(archive_dir) / name))
    return RecordRef(name, len(data), sha256_bytes(data))


def read_document(archive_dir: PathLike, ref: RecordRef) -> dict[str, Any]:
    """The JSON object of the document ``ref`` (as the manifest lists it), once its size and SHA-256 are those
    listed (``read_stored``) and its seal is proven; ``ArchiveCorruptError`` names the file and what is wrong
    otherwise. Reads at most the listed size (itself at most ``MAX_DOCUMENT_BYTES``)."""
    data = read_stored(archive_dir, ref.file, "document", ref.bytes, ref.sha256)
    doc: dict[str, Any] = load_sealed(data, str(Path(archive_dir) / ref.file))
    return doc
