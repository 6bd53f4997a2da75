"""Whether an archive's engine caches (docs/FORMAT.md, "Engine caches") may be handed to the engine here.

They are code: Inductor's generated Python, pickled artifacts, cubins and compiled launchers, which the
engine imports and runs as its own. An archive is data, and nothing read from it may select code to run,
unless the user vouches for it: so the caches are handed out only from an archive whose manifest is signed
with the key in force (docs/TRUST.md), never on checksums alone. Then every file is checked against the
signed listing as it is copied out (gate/cachecopy.py), and only where the caches were made with this process's
torch, Triton, engine and GPU: another version's artifacts would be loaded as if they were this one's.

Everything that keeps them from being used raises ``CachesRefusedError`` naming the reason and the next step;
the engine plugins then start the engine without them (docs/TRUST.md, "Engine caches").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from foundry.errors import ArchiveError, CachesRefusedError
from foundry.schema import CACHES_DOCUMENT, CachePayload
from foundry.trust import KEY_ENV, KeySource, configured_key

from .cachecopy import copy_out, read_cache_file
from .documents import listed_names, read_archive_document

__all__ = ["caches_refused", "open_engine_caches", "read_engine_cache_files"]

# The most bytes ``read_engine_cache_files`` returns: it hands out small files whole (the engine's metadata), never
# compiled artifacts, which go through ``open_engine_caches``' copy.
READ_FILES_MAX_BYTES = 1 << 20


def open_engine_caches(
    archive_dir: str | os.PathLike[str],
    here: Mapping[str, str],
    dest: str | os.PathLike[str],
    signing_key: KeySource | None = None,
) -> dict[str, Path] | None:
    """Copies the archive's engine caches into the new directory ``dest`` and returns each cache's directory
    there (``{"triton": dest/triton, ...}``), or None when the archive carries none.

    ``here`` holds this process's values of what the caches were made with (torch, Triton, the engine, CUDA,
    the GPU, as the plugin that packed them names them): a field the archive records that is missing here or
    holds another value refuses them. So does an archive not signed with the key in force (``signing_key``,
    else the configured one), and a file that is not the signed listing's bytes: ``CachesRefusedError``, with
    ``dest`` removed. Reads the archive only as its manifest lists it."""
    archive = Path(archive_dir)
    shown = archive / CACHES_DOCUMENT
    payload = _signed_listing(archive, signing_key)
    if payload is None:
        return None
    differences = [(k, saved, here.get(k)) for k, saved in payload.identity if here.get(k) != saved]
    if differences:
        lines = "; ".join(f"{k}: saved {saved!r}, here {now!r}" for k, saved, now in differences)
        raise CachesRefusedError(
            f"{shown}: the engine caches were made with other software or another GPU ({lines}); artifacts of "
            "another version are not loaded as this one's. Run SAVE again with this machine's versions."
        )
    return copy_out(archive, payload, Path(dest))


def _signed_listing(archive: Path, signing_key: KeySource | None) -> CachePayload | None:
    """The archive's engine-cache listing, proven signed with the key in force (``signing_key``, else the configured
    one); None when the archive carries no caches. ``CachesRefusedError`` when it may not be used: no key in force,
    or a listing or manifest that does not prove."""
    shown = archive / CACHES_DOCUMENT
    key = configured_key(signing_key)
    try:
        if CACHES_DOCUMENT not in listed_names(archive, key):
            return None
    except ArchiveError as exc:
        raise caches_refused(archive, exc) from None
    if key is None:
        raise CachesRefusedError(
            f"{shown}: the archive carries engine caches, which are compiled code the engine would run, and LOAD "
            f"hands them to the engine only from an archive signed with a key in force; no key is configured. Set "
            f"{KEY_ENV} to the key the archive was signed with (docs/TRUST.md), or run SAVE without packing caches."
        )
    try:
        return CachePayload.from_json(read_archive_document(archive, CACHES_DOCUMENT, key), str(shown))
    except ArchiveError as exc:
        raise caches_refused(archive, exc) from None


def caches_refused(archive: Path, exc: ArchiveError) -> CachesRefusedError:
    """The refusal of an archive's engine caches whose listing cannot be read (``exc`` says why), as LOAD
    refuses them and ``foundry verify`` reports them."""
    refused = CachesRefusedError(f"{archive / CACHES_DOCUMENT}: the engine caches cannot be used: {exc}")
    return refused.as_kind(exc.kind)


def read_engine_cache_files(
    archive_dir: str | os.PathLike[str],
    cache: str,
    select: Callable[[str], bool],
    signing_key: KeySource | None = None,
) -> dict[str, bytes]:
    """The bytes of the files of the archive's engine cache ``cache`` whose path ``select`` takes, by path; {} when
    the archive carries no caches or none such. For what an engine reads before the process that copies the
    caches out exists (vLLM's front end resolves the model's class from its model-info cache): small files, read
    whole (``READ_FILES_MAX_BYTES`` in all).

    Proven as ``open_engine_caches`` proves the caches, but for their identity (the caller holds no GPU to compare
    with, and takes only files the engine checks itself): the manifest signed with the key in force (none in force
    refuses them), the listing the signed one, each file of the listed size and SHA-256. ``CachesRefusedError``
    names what is wrong."""
    archive = Path(archive_dir)
    payload = _signed_listing(archive, signing_key)
    if payload is None:
        return {}
    out: dict[str, bytes] = {}
    total = 0
    for tree in payload.trees:
        if tree.name != cache:
            continue
        for file in tree.files:
            if not select(file.path):
                continue
            total += file.bytes
            if total > READ_FILES_MAX_BYTES:
                raise CachesRefusedError(
                    f"{archive / CACHES_DOCUMENT}: the files asked of cache {cache!r} hold more than "
                    f"{READ_FILES_MAX_BYTES} bytes, more than are read whole; open the caches instead"
                )
            data = bytearray()
            read_cache_file(archive, file, data.extend)
            out[file.path] = bytes(data)
    return out
