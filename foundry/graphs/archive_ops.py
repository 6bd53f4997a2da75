"""Archive-wide operations of the public API: the manifest and bulk image loading."""

from __future__ import annotations

import os
import re
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
    sha256_file,
    write_manifest,
)
from ..archive.images import IMAGES_DIR
from ..errors import ArchiveError, FoundryError
from .load import load_images
from .save import SavedGraph, saved_graphs

_SHA256 = re.compile(r"[0-9a-f]{64}")

__all__ = ["group_by_topology", "load_cuda_modules_and_libraries", "save_graph_manifest"]


def group_by_topology(graphs: list[SavedGraph]) -> list[tuple[str, list[int]]]:
    """(topology key, graph indices) in first-seen order; the first index of each group is its template."""
    groups: dict[str, list[int]] = {}
    for i, g in enumerate(graphs):
        groups.setdefault(g.meta.topology, []).append(i)
    return list(groups.items())


def save_graph_manifest(archive_dir: str | os.PathLike[str]) -> Manifest:
    """Writes ``graph_manifest.json`` for every graph this process saved, grouped by topology."""
    archive = Path(archive_dir)
    graphs = saved_graphs()
    if not graphs:
        raise FoundryError("save_graph_manifest(): this process saved no graphs (call CUDAGraph.save first)")
    groups = group_by_topology(graphs)
    group_of = {i: gi for gi, (_, members) in enumerate(groups) for i in members}
    entries = []
    images: dict[str, ImageEntry] = {}
    for i, g in enumerate(graphs):
        assert g.meta.record is not None
        rel = os.path.relpath(g.json_path.resolve(), archive.resolve())
        gi = group_of[i]
        entries.append(
            GraphEntry(
                name=g.meta.name,
                json=rel,
                json_sha256=sha256_file(g.json_path),
                record_sha256=g.meta.record.sha256,
                nodes=g.meta.stats_dict().get("nodes", 0),
                topology=g.meta.topology,
                group=gi,
                role=GraphRole.TEMPLATE if groups[gi][1][0] == i else GraphRole.MEMBER,
            )
        )
        for ref in g.meta.images:
            images.setdefault(ref.sha256, ImageEntry.from_ref(ref))
    manifest = Manifest(
        foundry_version=__version__,
        created=now_iso(),
        identity=graphs[-1].meta.identity,
        region=graphs[-1].meta.region,
        images=tuple(images.values()),
        graphs=tuple(entries),
        groups=tuple(Group(key, members[0], tuple(members[1:])) for key, members in groups),
    )
    write_manifest(archive, manifest)
    return manifest


def load_cuda_modules_and_libraries(archive_dir: str | os.PathLike[str], verify: bool = True) -> int:
    """Loads the archive's kernel images into this process; returns how many were loaded.

    With a manifest, exactly the images it lists; without one (graphs saved, manifest not written yet),
    every image in the directory. Each image's SHA-256 is checked before the driver sees it.
    """
    archive = Path(archive_dir)
    if (archive / MANIFEST_NAME).is_file():
        shas = [e.sha256 for e in read_manifest(archive).images]
    else:
        image_dir = archive / IMAGES_DIR
        if not image_dir.is_dir():
            raise ArchiveError(f"{archive} is not a Foundry archive: it has neither {MANIFEST_NAME} nor {IMAGES_DIR}/")
        shas = sorted(p.stem for p in image_dir.glob("*.bin") if _SHA256.fullmatch(p.stem))
    load_images(archive, shas, verify)
    return len(shas)
