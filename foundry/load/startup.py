"""What LOAD does at process start: ``load_cuda_modules_and_libraries`` (the seed README calls it
before the model is built) takes off LOAD's path what can be done early: it reserves the region,
loads the archive's kernel images, looks up the kernels the manifest lists, validates the graphs'
metadata and starts the builder threads with their heaps paged in (threads.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from foundry import kernels
from foundry.errors import ArchiveCorruptError, ArchiveError, DriverError, KernelNotFoundError
from foundry.format import (
    IMAGES_DIR,
    MANIFEST_NAME,
    GraphEntry,
    ImageEntry,
    KeySource,
    authenticate_manifest,
    configured_key,
    is_sha256,
    read_manifest,
    read_region_hint,
)
from foundry.native import current_context
from foundry.region import hold_allocation_region

from .build import load_images
from .source import read_meta_cached
from .threads import LIMITS, warm_builders

__all__ = ["load_cuda_modules_and_libraries"]


def load_cuda_modules_and_libraries(
    archive_dir: str | os.PathLike[str], verify: bool = True, signing_key: KeySource | None = None
) -> int:
    """Loads the archive's kernel images into this process; returns how many were loaded.

    With a manifest, exactly the images it lists; without one (graphs saved, manifest not written yet),
    every image in the directory. Each image's SHA-256 is checked before the driver sees it. Where a
    CUDA context is current, the kernels the manifest lists for each image are looked up too (which
    is when the driver loads them), so that LOAD later finds them ready; and the graphs' metadata
    files the manifest lists are read and validated ahead of LOAD.

    With a signing key (``signing_key``, else the configured one: see foundry.format.signing), the
    manifest's signature is proven first, before the GPU is touched: an archive without a manifest,
    unsigned, signed with another key or changed since raises ``ArchiveSignatureError``. Images are
    then always hashed (``verify`` is ignored), and the region reserved is the signed manifest's, not
    the unsigned ``region.json`` hint's.
    """
    archive = Path(archive_dir)
    key = configured_key(signing_key)
    signed = authenticate_manifest(archive, key) if key is not None else None
    if signed is not None:
        verify = True
        hint: tuple[int, int] | None = (signed.region.base, signed.region.size)
    else:
        hint = read_region_hint(archive)
    if hint is not None:  # reserve the region's range before the images (and the driver) take VA space
        hold_allocation_region(*hint)
    entries: tuple[ImageEntry, ...] = ()
    graphs: tuple[GraphEntry, ...] = ()
    if signed is not None:
        entries, graphs = signed.images, signed.graphs
        shas = [e.sha256 for e in entries]
    elif (archive / MANIFEST_NAME).is_file():
        manifest = read_manifest(archive)
        entries, graphs = manifest.images, manifest.graphs
        shas = [e.sha256 for e in entries]
    else:
        image_dir = archive / IMAGES_DIR
        if not image_dir.is_dir():
            raise ArchiveError(f"{archive} is not a Foundry archive: it has neither {MANIFEST_NAME} nor {IMAGES_DIR}/")
        shas = sorted(p.stem for p in image_dir.glob("*.bin") if is_sha256(p.stem))
    load_images(archive, shas, verify)
    _load_kernels(entries)
    template_nodes = _read_graph_metadata(archive, graphs)
    warm_builders(template_nodes, LIMITS.builders)
    return len(shas)


def _read_graph_metadata(archive: Path, graphs: tuple[GraphEntry, ...]) -> int:
    """Reads and validates the manifest's graph JSONs once, so that start_graph_builds finds them
    parsed (read_meta_cached keeps them by content hash: a file changed since is parsed afresh). A
    file that cannot be read is left for LOAD, which reports it where the graph is asked for.
    Returns how many nodes LOAD builds before every graph is replayable (templates and graphs of no
    group)."""
    nodes = 0
    for g in graphs:
        try:
            meta, _digest = read_meta_cached(archive / g.json)
        except ArchiveError:
            continue
        if meta.template is None:
            nodes += meta.stats_dict().get("nodes", 0)
    return nodes


def _load_kernels(entries: tuple[ImageEntry, ...]) -> None:
    """Looks up the kernels the manifest says the graphs launch. The driver loads a library's
    kernels lazily, on their first lookup in a context (tens of ms for a decoder's ~90 kernels, as the
    benchmark's driver probe measures); done here, at process start, that is off LOAD's path. Without a
    current context (CUDA not initialised yet) LOAD looks them up itself."""
    try:
        current_context()
    except DriverError:
        return
    for e in entries:
        for name in e.kernels:
            try:
                kernels.loaded_function(kernels.KernelRef(e.sha256, name))
            except KernelNotFoundError as exc:
                raise ArchiveCorruptError(
                    f"the manifest lists kernel {name} in image {e.sha256[:16]}..., which the driver cannot find "
                    f"there ({exc}): the manifest does not belong to these images. Save the archive again."
                ) from exc
