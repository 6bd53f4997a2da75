"""Archive-wide operations of the public API: the manifest and bulk image loading."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from .. import __version__
from ..archive import (
    MANIFEST_NAME,
    GraphEntry,
    GraphRole,
    Group,
    ImageEntry,
    Manifest,
    now_iso,
    read_manifest,
    read_region_hint,
    sha256_file,
    write_manifest,
)
from ..archive.graphfile import read_meta_digest
from ..archive.images import IMAGES_DIR
from ..archive.jsonfields import is_sha256
from ..archive.signed_archive import authenticate_manifest, sign_manifest
from ..archive.signing import KeySource, configured_key
from ..driver import current_context
from ..errors import ArchiveCorruptError, ArchiveError, DriverError, FoundryError, KernelNotFoundError
from ..kernels import registry
from ..memory.layout import region_spec
from ..memory.region import hold_allocation_region, region_state
from .builders import warm_builders
from .gcpause import gc_paused
from .load import load_images
from .loader import MAX_BUILDERS
from .save import SAVE_PHASES, replace_saved, saved_graphs
from .templates import plan_groups, write_member_deltas

__all__ = ["load_cuda_modules_and_libraries", "save_graph_manifest"]


@gc_paused()
def save_graph_manifest(archive_dir: str | os.PathLike[str], signing_key: KeySource | None = None) -> Manifest:
    """Writes ``graph_manifest.json`` for every graph this process saved, grouped into templates.

    Members of a topology group are rewritten as deltas against their template (each verified to be
    its template plus its overrides) before the manifest, which names them all, is written last.

    With a signing key (``signing_key``, else the configured one: see foundry.archive.signing) the
    manifest carries an HMAC-SHA256 signature, which covers the whole archive (docs/TRUST.md). A key
    file that cannot be read raises ``ArchiveSignatureError`` before anything is written.
    """
    archive = Path(archive_dir)
    key = configured_key(signing_key)
    graphs = saved_graphs()
    if not graphs:
        raise FoundryError("save_graph_manifest(): this process saved no graphs (call CUDAGraph.save first)")
    clock = time.perf_counter()
    plans = plan_groups(graphs)
    clock = SAVE_PHASES.add("manifest_plan", clock)
    graphs = write_member_deltas(graphs, plans)
    replace_saved(graphs)
    clock = SAVE_PHASES.add("manifest_deltas", clock)
    group_of = {i: gi for gi, plan in enumerate(plans) for i in (plan.template, *plan.members)}
    entries = []
    images: dict[str, ImageEntry] = {}
    kernels: dict[str, set[str]] = {}
    for i, g in enumerate(graphs):
        assert g.meta.record is not None
        plan = plans[group_of[i]]
        entries.append(
            GraphEntry(
                name=g.meta.name,
                json=os.path.relpath(g.json_path.resolve(), archive.resolve()),
                json_sha256=sha256_file(g.json_path),
                record_sha256=g.meta.record.sha256,
                nodes=g.meta.stats_dict().get("nodes", 0),
                topology=g.meta.topology,
                group=group_of[i],
                role=GraphRole.TEMPLATE if plan.template == i else GraphRole.MEMBER,
            )
        )
        for ref in g.meta.images:
            images.setdefault(ref.sha256, ImageEntry.from_ref(ref))
        for fn in g.meta.functions:
            kernels.setdefault(fn.image, set()).add(fn.name)
    last = graphs[-1].meta
    manifest = Manifest(
        foundry_version=__version__,
        created=now_iso(),
        identity=last.identity,
        region=region_spec(full_log=True) if region_state().reserved else last.region,
        images=tuple(replace(e, kernels=tuple(sorted(kernels.get(sha, ())))) for sha, e in images.items()),
        graphs=tuple(entries),
        groups=tuple(Group(graphs[p.template].meta.topology, p.template, p.members, p.varying) for p in plans),
    )
    if key is not None:
        manifest = sign_manifest(manifest, key)
    # Everything SAVE wrote so far was written without fsync; one sync makes it all durable before
    # the manifest, the archive's commit point, is written (durably) last.
    clock = SAVE_PHASES.add("manifest_entries", clock)
    os.sync()
    clock = SAVE_PHASES.add("sync", clock)
    write_manifest(archive, manifest)
    SAVE_PHASES.add("manifest_write", clock)
    return manifest


def load_cuda_modules_and_libraries(
    archive_dir: str | os.PathLike[str], verify: bool = True, signing_key: KeySource | None = None
) -> int:
    """Loads the archive's kernel images into this process; returns how many were loaded.

    With a manifest, exactly the images it lists; without one (graphs saved, manifest not written yet),
    every image in the directory. Each image's SHA-256 is checked before the driver sees it. Where a
    CUDA context is current, the kernels the manifest lists for each image are looked up too (which
    is when the driver loads them), so that LOAD later finds them ready; and the graphs' metadata
    files the manifest lists are read and validated ahead of LOAD.

    With a signing key (``signing_key``, else the configured one: see foundry.archive.signing), the
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
    warm_builders(template_nodes, MAX_BUILDERS)
    return len(shas)


def _read_graph_metadata(archive: Path, graphs: tuple[GraphEntry, ...]) -> int:
    """Reads and validates the manifest's graph JSONs once, so that start_graph_builds finds them
    parsed (read_meta_digest keeps them by content hash: a file changed since is parsed afresh). A
    file that cannot be read is left for LOAD, which reports it where the graph is asked for.
    Returns how many nodes LOAD builds before every graph is replayable (templates and graphs of no
    group)."""
    nodes = 0
    for g in graphs:
        try:
            meta, _digest = read_meta_digest(archive / g.json)
        except ArchiveError:
            continue
        if meta.template is None:
            nodes += meta.stats_dict().get("nodes", 0)
    return nodes


def _load_kernels(entries: tuple[ImageEntry, ...]) -> None:
    """Looks up the kernels the manifest says the graphs launch. The driver loads a library's
    kernels lazily, on their first lookup in a context (tens of ms for a decoder's ~90 kernels:
    session 2's driver probe); done here, at process start, that is off LOAD's path. Without a
    current context (CUDA not initialised yet) LOAD looks them up itself."""
    try:
        current_context()
    except DriverError:
        return
    for e in entries:
        for name in e.kernels:
            try:
                registry.loaded_function(registry.KernelRef(e.sha256, name))
            except KernelNotFoundError as exc:
                raise ArchiveCorruptError(
                    f"the manifest lists kernel {name} in image {e.sha256[:16]}..., which the driver cannot find "
                    f"there ({exc}): the manifest does not belong to these images. Save the archive again."
                ) from exc
