"""Archive directories on disk, as tests look at and damage them: every file's SHA-256, the graph and
manifest files, a private copy, one byte inverted, a file cut short, and a JSON file edited and sealed
again (as if SAVE had written the edited content: to reach the checks behind the seal); and the same for a
graph wherever its archive stores it (its files, or the graph bundle), or the archive turned into one that
stores every graph in its files.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundry.archive import BUNDLE_NAME, MANIFEST_NAME, GraphStore, container_path, read_bundle, read_manifest
from foundry.archive.bundle import pack_bundle
from foundry.errors import ArchiveError
from foundry.schema.jsondocs import load_sealed, seal


def archive_files(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``root`` (empty when it does not exist)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def graph_files(root: Path) -> list[str]:
    """The graph and manifest files (.json, .cugraph) under ``root``."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".json", ".cugraph"))


def copy_archive(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip_byte(path: Path, offset: int) -> None:
    """Inverts one byte of a file (negative offsets count from the end)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def load_doc(path: Path) -> dict[str, Any]:
    """The document of a sealed archive JSON file (its seal checked and removed)."""
    doc: dict[str, Any] = load_sealed(path.read_bytes(), str(path))
    return doc


def write_doc(path: Path, doc: dict[str, Any]) -> None:
    """Writes ``doc`` sealed, as SAVE writes archive JSON files."""
    path.write_bytes(seal(doc))


def edit_doc(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Edits a sealed archive JSON file and seals it again."""
    doc = load_doc(path)
    edit(doc)
    write_doc(path, doc)


# ------------------------------------------------------------------ graphs wherever the archive stores them
# A graph saved in its archive directory is stored in the archive's graph bundle only (docs/FORMAT.md, "Graph
# bundle"); these read and change a graph by its JSON path, in its files or in the bundle alike.


def stored(path: Path) -> tuple[bytes, bytes]:
    """The JSON and container bytes of the graph whose JSON is ``path``, from where its archive stores them."""
    listing = GraphStore().listing(path)
    if listing is not None and listing.bundle is not None:
        return bytes(listing.bundle.json(listing.slot)), bytes(listing.bundle.container(listing.slot))
    return path.read_bytes(), container_path(path).read_bytes()


def is_bundled(path: Path) -> bool:
    listing = GraphStore().listing(path)
    return listing is not None and listing.bundle is not None


def stored_doc(path: Path) -> dict[str, Any]:
    """The document of the graph JSON ``path`` (its seal checked and removed), wherever it is stored."""
    doc: dict[str, Any] = load_sealed(stored(path)[0], str(path))
    return doc


def store(path: Path, json_bytes: bytes | None = None, container: bytes | None = None) -> None:
    """Writes the graph ``path``'s JSON and/or container back where its archive stores them, as a damaged or
    edited copy: for a bundled graph, the bundle is written again with them and the manifest's size of it
    restated (nothing else: the manifest's hash of the JSON stays)."""
    listing = GraphStore().listing(path)
    if listing is None or listing.bundle is None:
        if json_bytes is not None:
            path.write_bytes(json_bytes)
        if container is not None:
            container_path(path).write_bytes(container)
        return
    arch = listing.archive
    manifest = read_manifest(arch)
    assert manifest.bundle is not None
    bundle = read_bundle(arch, manifest.bundle.file, manifest.bundle.bytes, len(manifest.bundled()))
    files = [[bytes(j), bytes(c)] for j, c in zip(bundle.jsons, bundle.containers, strict=True)]
    if json_bytes is not None:
        files[listing.slot][0] = json_bytes
    if container is not None:
        files[listing.slot][1] = container
    data = pack_bundle(files)
    (arch / BUNDLE_NAME).write_bytes(data)
    edit_doc(arch / MANIFEST_NAME, lambda d: d["bundle"].update(bytes=len(data)))


def edit_stored(path: Path, edit: Callable[[dict[str, Any]], object]) -> bytes:
    """Edits the graph JSON ``path`` wherever it is stored and seals it again (``edit_doc``); its new bytes."""
    doc = stored_doc(path)
    edit(doc)
    data = seal(doc)
    store(path, json_bytes=data)
    return data


def flip_stored(path: Path, offset: int, part: str = "json") -> None:
    """Inverts one byte of the graph ``path``'s JSON or container (``part``) wherever it is stored."""
    json_bytes, container = stored(path)
    data = bytearray(json_bytes if part == "json" else container)
    data[offset] ^= 0xFF
    store(path, **{"json_bytes" if part == "json" else "container": bytes(data)})


def unbundle(arch: Path) -> None:
    """The archive as one that stores every graph in its files (a form the format allows: docs/FORMAT.md): each
    bundled graph's files written from the bundle, its JSON stating its region's range itself (format version 3,
    or 4 with peers or a rank, as a graph saved outside the bundle states it: the files stand without the
    manifest), the manifest restated (``stored``, the JSONs' hashes, no ``bundle``) and sealed again, the bundle
    removed. Tests that damage a graph's files use it. A signed manifest's signature no longer matches it (sign it
    again where a test needs one)."""
    manifest = read_manifest(arch)
    if manifest.bundle is None:
        return
    bundle = read_bundle(arch, manifest.bundle.file, manifest.bundle.bytes, len(manifest.bundled()))
    hashes: dict[str, str] = {}
    ranged = {k: v for k, v in manifest.region.to_json().items() if k not in ("high_water", "live", "events")}
    for slot, i in enumerate(manifest.bundled()):
        path = arch / manifest.graphs[i].json
        data = bytes(bundle.jsons[slot])
        try:
            doc = load_sealed(data, str(path))
        except ArchiveError:  # damaged in the bundle: moved as it is, still damaged
            doc = None
        if doc is not None and doc.get("format_version") == 5:  # its range is the manifest's: stated in the file now
            doc.update(format_version=4 if "peers" in doc else 3, region={**ranged, **doc["region"]})
            data = seal(doc)
            hashes[manifest.graphs[i].json] = hashlib.sha256(data).hexdigest()
        path.write_bytes(data)
        container_path(path).write_bytes(bytes(bundle.containers[slot]))

    def relist(doc: dict[str, Any]) -> None:
        for g in doc["graphs"]:
            g["stored"] = "files"
            g["json_sha256"] = hashes.get(g["json"], g["json_sha256"])
        del doc["bundle"]

    edit_doc(arch / MANIFEST_NAME, relist)
    (arch / BUNDLE_NAME).unlink()


def relist(path: Path) -> str:
    """Restates, as a forger would, the SHA-256 the manifest beside the graph ``path`` lists for its JSON: that of
    its bytes as stored now (the manifest sealed again). Returns it."""
    listing = GraphStore().listing(path)
    assert listing is not None, f"{path} is not listed by the manifest beside it"
    digest = hashlib.sha256(stored(path)[0]).hexdigest()
    edit_doc(listing.archive / MANIFEST_NAME, lambda d: d["graphs"][listing.index].update(json_sha256=digest))
    return digest


def rebundle(arch: Path) -> None:
    """``unbundle`` undone: every graph the manifest lists by a plain file name moved from its files into the
    graph bundle, as SAVE stores it (the manifest restated and sealed again)."""
    doc = load_doc(arch / MANIFEST_NAME)
    files = []
    for g in doc["graphs"]:
        if "/" not in g["json"]:
            path = arch / g["json"]
            files.append((path.read_bytes(), container_path(path).read_bytes()))
            g["stored"] = "bundle"
    data = pack_bundle(files)
    (arch / BUNDLE_NAME).write_bytes(data)
    doc["bundle"] = {"file": BUNDLE_NAME, "bytes": len(data)}
    write_doc(arch / MANIFEST_NAME, doc)
    for g in doc["graphs"]:
        if g["stored"] == "bundle":
            (arch / g["json"]).unlink()
            container_path(arch / g["json"]).unlink()
