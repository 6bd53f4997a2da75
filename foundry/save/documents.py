"""Documents a program keeps in its archive (docs/FORMAT.md, "Documents"): an engine plugin's metadata, say.
Written before ``save_graph_manifest``, which lists each one named in its ``documents`` argument; LOAD reads
them back with ``foundry.read_archive_document``, only as the manifest lists them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from foundry.storage import write_document

__all__ = ["write_archive_document"]


def write_archive_document(archive_dir: str | os.PathLike[str], name: str, doc: Mapping[str, Any]) -> None:
    """Writes the JSON object ``doc`` as the sealed document ``archive_dir/name`` (a ``.json`` file name, not
    one of Foundry's own). It is part of the archive once ``save_graph_manifest(archive_dir, documents=[name,
    ...])`` lists it: write it before that call, and not again after. A bad name, a ``doc`` that is not a JSON
    object or is larger than ``foundry.storage.documents.MAX_DOCUMENT_BYTES`` raises ``ValueError``, and nothing is
    written."""
    write_document(archive_dir, name, doc)
