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
    Manifest,
    authenticate_manifest,
    configured_key,
    inside,
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

    The manifest (sealed: any change to it is refused) gives the region to reserve, the images with
    their sizes and the kernels; without one, ``region.json`` and the images directory do. With a
    signing key (``signing_key``, else the configured one: see foundry.format.signing), the manifest's
    signature is proven first, before the GPU is touched: an archive without a manifest, unsigned,
    signed with another key or changed since raises ``ArchiveSignatureError``, and images are always
    hashed (``verify=False``, which skips hashing them, is ignored).
    """
    archive = Path(archive_dir)
    key = configured_key(signing_key)
    manifest: Manifest | None = None
    if key is not None:
        manifest = authenticate_manifest(archive, key)
        verify = True
    elif (archive / MANIFEST_NAME).exists():
        manifest = read_manifest(archive)
    # The region's range is reserved before the images (and the driver) take VA space: the manifest's
    # region where there is a manifest (it is sealed, and signed when a key is configured), else the hint.
    hint = (manifest.region.base, manifest.region.size) if manifest is not None else read_region_hint(archive)
    if hint is not None:
        hold_allocation_region(*hint)
    entries: tuple[ImageEntry, ...] = ()
    graphs: tuple[GraphEntry, ...] = ()
    if manifest is not None:
        entries, graphs = manifest.images, manifest.graphs
        shas = [e.sha256 for e in entries]
    else:
        image_dir = archive / IMAGES_DIR
        if not image_dir.is_dir():
            raise ArchiveError(f"{archive} is not a Foundry archive: it has neither {MANIFEST_NAME} nor {IMAGES_DIR}/")
        shas = sorted(p.stem for p in image_dir.glob("*.bin") if is_sha256(p.stem))
    load_images(archive, shas, verify, sizes={e.sha256: e.bytes for e in entries})
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
            # Only graphs inside the archive: a manifest may name graphs saved beside it, which the program
            # loads by their own path; nothing is read through a manifest path that leaves the archive.
            meta, _digest = read_meta_cached(inside(archive, g.json, "graph metadata"))
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
