"""`foundry inspect PATH`: what an archive (or one graph) holds. Needs neither a GPU nor torch."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from foundry.archive import (
    MANIFEST_NAME,
    GraphStore,
    manifest_if_any,
    read_manifest,
    read_meta,
    resolve_archive_dir,
    stored_against,
)
from foundry.errors import ArchiveError
from foundry.schema import GraphMeta
from foundry.schema.jsonfields import relative_path_problem
from foundry.sizes import format_size
from foundry.storage import inside, real_name
from foundry.tables import plural, table

from .target import EXIT_CANNOT_START, archive_target

__all__ = ["add_parser", "summarize"]


def _graph_metas(path: Path) -> tuple[Path, list[tuple[Path, GraphMeta]], Any, list[str]]:
    """(archive directory, the graphs read with their metadata, the manifest or None, the manifest's
    graphs saved beside the archive: nothing is read through a path that leaves it). For one graph's
    .json, the manifest is that of the archive its images are in."""
    if path.is_dir():
        manifest = read_manifest(path)
        store = GraphStore(lambda d: manifest if real_name(d) == real_name(path) else manifest_if_any(d))
        metas, outside = [], []
        for g in manifest.graphs:
            if relative_path_problem(g.json):
                outside.append(g.json)
                continue
            inside(path, g.json, "graph metadata")  # no link out of the archive
            json_path = path / g.json  # by its name, where a bundled graph is looked up
            metas.append((json_path, read_meta(json_path, store)))
        return path, metas, manifest, outside
    meta = read_meta(path)
    archive = resolve_archive_dir(path, meta)
    beside = read_manifest(archive) if (archive / MANIFEST_NAME).exists() else None
    return archive, [(path, meta)], beside, []


def summarize(path: Path) -> dict[str, Any]:
    """The facts `inspect` prints, as one JSON-ready dict."""
    archive_dir, metas, manifest, outside = _graph_metas(path)
    if not metas:
        raise ArchiveError(f"{path}: the manifest lists no graphs; there is nothing to inspect")
    kernels: Counter[tuple[str, str]] = Counter()
    variables: dict[tuple[str, str, int, str], int] = {}  # (image, name, bytes, sha256) -> graphs carrying it
    images: dict[str, tuple[int, str]] = {}
    totals: Counter[str] = Counter()
    graphs = []
    for json_path, meta in metas:
        stats = meta.stats_dict()
        totals.update(stats)
        for f in meta.functions:
            kernels[(f.image, f.name)] += 1
        for img in meta.images:
            images[img.sha256] = (img.bytes, img.format.value)
            for v in img.variables or ():
                key = (img.sha256, v.name, v.bytes, v.sha256)
                variables[key] = variables.get(key, 0) + 1
        assert meta.record is not None
        graphs.append(
            {
                "name": meta.name,
                "json": str(json_path),
                "nodes": stats.get("nodes", 0),
                "kernels": stats.get("kernel", 0),
                "record_bytes": meta.record.bytes,
                "topology": meta.topology[:12],
                "rng": meta.rng is not None,
                "outputs": len(meta.outputs),
            }
        )
    first = metas[0][1]
    live = sum(length for _, length in first.region.live)
    signature = manifest.signature if manifest is not None else None
    return {
        "archive": str(archive_dir),
        "manifest": manifest is not None,
        "signed_with": signature.get("key_id") if isinstance(signature, dict) else None,
        "identity": first.identity.to_json(),
        "region": {
            "base": hex(first.region.base),
            "size": first.region.size,
            "high_water": max(m.region.high_water for _, m in metas),
            "live_bytes": live,
        },
        "graphs": graphs,
        "groups": len(manifest.groups) if manifest is not None and path.is_dir() else None,
        # The graph bundle, the one copy of the graphs saved in the archive directory (docs/FORMAT.md); None: the
        # manifest names none (every graph is stored in its files).
        "bundle_bytes": manifest.bundle.bytes if manifest is not None and manifest.bundle is not None else None,
        # The rank the bundle is stored against, and its file's bytes on disk; None: stored in full.
        "bundle_against": stored_against(path) if manifest is not None and manifest.bundle is not None else None,
        "outside": outside,
        "nodes": dict(totals),
        "images": [{"sha256": sha, "bytes": b, "format": fmt} for sha, (b, fmt) in images.items()],
        "image_bytes": sum(b for b, _ in images.values()),
        "kernels": [{"image": img[:12], "name": name, "graphs": n} for (img, name), n in kernels.most_common()],
        "variables": [
            {"image": img[:12], "name": name, "bytes": size, "sha256": sha, "graphs": n}
            for (img, name, size, sha), n in sorted(variables.items())
        ],
    }


def _print(summary: dict[str, Any], kernels: int) -> None:
    ident = summary["identity"]
    signed = f"signed with key {summary['signed_with']}" if summary["signed_with"] else "unsigned"
    state = f"manifest: yes, {signed}" if summary["manifest"] else "manifest: no"
    print(f"archive   {summary['archive']}  ({state}; `foundry verify` checks it)")
    print(
        f"saved on  {ident['gpu_name']}, {ident['sm_count']} SMs, sm_{ident['compute_capability'][0]}"
        f"{ident['compute_capability'][1]}, driver {ident['driver_version']}, torch {ident['torch_version']}, "
        f"foundry {ident['foundry_version']}"
    )
    r = summary["region"]
    print(
        f"region    base {r['base']}, size {format_size(r['size'])}, used up to {format_size(r['high_water'])}, "
        f"live {format_size(r['live_bytes'])}"
    )
    n = summary["nodes"]
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(n.items()) if v and k not in ("nodes", "edges"))
    groups = f", {plural(summary['groups'], 'topology group')}" if summary["groups"] is not None else ""
    print(
        f"graphs    {len(summary['graphs'])}{groups}: {plural(n.get('nodes', 0), 'node')} ({kinds}), "
        f"{plural(n.get('edges', 0), 'edge')}"
    )
    print(f"images    {len(summary['images'])}, {format_size(summary['image_bytes'])}")
    if summary["bundle_bytes"] is not None:
        size = format_size(summary["bundle_bytes"])
        print(f"bundle    {size}: the graphs saved in the archive directory, stored once, in one file")
        if summary["bundle_against"] is not None:
            rank, on_disk = summary["bundle_against"]
            print(f"          stored against rank_{rank}'s: {format_size(on_disk)} on disk (ship the deployment whole)")
    print()
    rows = [
        [g["name"], g["nodes"], g["kernels"], format_size(g["record_bytes"]), g["topology"], "yes" if g["rng"] else ""]
        for g in summary["graphs"]
    ]
    print(table(["graph", "nodes", "kernels", "record", "topology", "rng"], rows))
    print()
    rows = [[k["name"][:90], k["image"], k["graphs"]] for k in summary["kernels"][:kernels]]
    more = len(summary["kernels"]) - kernels
    print(table(["kernel", "image", "graphs"], rows))
    if more > 0:
        print(f"... and {plural(more, 'more kernel', 'more kernels')} (--kernels N to show more)")
    if summary["variables"]:
        print()
        rows = [[v["name"][:70], v["image"], format_size(v["bytes"]), v["sha256"][:12], v["graphs"]]
                for v in summary["variables"]]  # fmt: skip
        print("module variables LOAD writes into their images after loading them:")
        print(table(["variable", "image", "size", "value", "graphs"], rows))
    if summary["outside"]:
        beside = ", ".join(summary["outside"])
        print(f"\nnot read: graphs saved beside the archive ({beside}); inspect each by its own path")


def _run(args: argparse.Namespace) -> int:
    try:
        path = archive_target(args.path)
    except ValueError as exc:
        print(f"foundry inspect: {exc}", file=sys.stderr)
        return EXIT_CANNOT_START
    try:
        summary = summarize(path)
    except ArchiveError as exc:
        print(f"foundry inspect: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary, args.kernels)
    return 0


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count: give 0 or a positive number")
    return value


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        description=(
            "What an archive holds (give its directory, its graph_manifest.json, or one graph's .json): graphs, "
            "nodes by type, kernels, images, the module variables it carries, region use, the machine it was "
            "saved on. Needs neither a GPU nor torch."
        ),
        help="summarize an archive directory or a graph .json (no GPU needed)",
    )
    p.add_argument("path", help="archive directory (with graph_manifest.json) or a graph .json")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--kernels", type=_count, default=20, help="how many kernels to list (0 or more)")
    p.set_defaults(func=_run)
