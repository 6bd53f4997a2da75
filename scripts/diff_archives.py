"""What differs between two archives, node by node: two ranks' archives of one deployment, or two SAVEs of the
same rank in fresh processes (what differs there is process state no LOAD can reproduce).

    python scripts/diff_archives.py A B [--json OUT]

For every graph both archives hold (by name): node counts and types, and for each kernel node at the same
place the kernel, its launch (grid, block, shared memory, attributes) and its arguments, word by word (8
bytes; the words that differ are classed by where their two values point: both into their archive's region
at the same offset, both into it at other offsets, or elsewhere). Also the images, the module variables
LOAD writes, the region, the rank and the peer mappings. A member stored as a delta of its template is
compared by its delta's bytes only. Reads the archives' files, no GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from foundry.probe import archive, records, schema

WORD = 8


def _graphs(directory: Path) -> dict[str, Path]:
    manifest = archive.read_manifest(directory)
    return {entry.name: directory / entry.json for entry in manifest.graphs}


def _place(value: int, meta: schema.GraphMeta) -> int | None:
    """The region offset ``value`` points at, or None outside the region."""
    base, size = meta.region.base, meta.region.size
    return value - base if base <= value < base + size else None


def _halves(xor: int) -> str:
    """Which 32-bit half of a word differs: "high" alone is what 4 bytes of padding the host never wrote beside a
    32-bit field look like (or a 32-bit field's neighbour), not a pointer."""
    high, low = xor >> 32, xor & 0xFFFFFFFF
    return "both" if high and low else "high" if high else "low"


def _words(
    a: records.KernelNode, b: records.KernelNode, meta_a: schema.GraphMeta, meta_b: schema.GraphMeta
) -> list[dict[str, Any]]:
    out = []
    for at in range(0, max(len(a.args), len(b.args)), WORD):
        wa, wb = a.args[at : at + WORD], b.args[at : at + WORD]
        if wa == wb:
            continue
        va, vb = int.from_bytes(wa, "little"), int.from_bytes(wb, "little")
        pa, pb = _place(va, meta_a), _place(vb, meta_b)
        kind = (
            "region, same offset"
            if pa is not None and pa == pb
            else "region, other offset"
            if pa is not None and pb is not None
            else "other"
        )
        word: dict[str, Any] = {"offset": at, "a": f"{va:#x}", "b": f"{vb:#x}", "kind": kind}
        if pa is not None and pb is not None:
            word["shift"] = pb - pa  # the same shift over every word: one rule derives B's record from A's
            word["at_a"] = pa  # where in A's region: the offsets a shift covers say which allocations moved
        else:  # a 32-bit field beside 4 bytes the host never wrote differs in one half only
            word["halves"] = _halves(va ^ vb)
        out.append(word)
    return out


def diff_graph(path_a: Path, path_b: Path, stores: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """``stores``: one ``archive.GraphStore`` per archive, so that each reads its graph bundle once (a bundle
    stored against another rank's is rebuilt where it is opened)."""
    store_a, store_b = stores if stores is not None else (archive.GraphStore(), archive.GraphStore())
    meta_a, payload_a = archive.read_graph(path_a, store=store_a)
    meta_b, payload_b = archive.read_graph(path_b, store=store_b)
    if meta_a.template is not None or meta_b.template is not None:
        return {"member": True, "delta_identical": payload_a == payload_b}
    rec_a, rec_b = records.parse_record(payload_a), records.parse_record(payload_b)
    nodes_a, nodes_b = list(records.iter_nodes(rec_a)), list(records.iter_nodes(rec_b))
    out: dict[str, Any] = {
        "nodes": [len(nodes_a), len(nodes_b)],
        "types_identical": [type(n).__name__ for _, n in nodes_a] == [type(n).__name__ for _, n in nodes_b],
        "record_identical": payload_a == payload_b,
        "kernels": [],
    }
    for (path, a), (_, b) in zip(nodes_a, nodes_b, strict=False):
        if not isinstance(a, records.KernelNode) or not isinstance(b, records.KernelNode):
            continue
        name_a, name_b = meta_a.functions[a.function_index].name, meta_b.functions[b.function_index].name
        words = _words(a, b, meta_a, meta_b)
        launch = (a.grid, a.block, a.shared_mem, a.attrs) == (b.grid, b.block, b.shared_mem, b.attrs)
        if words or not launch or name_a != name_b or len(a.args) != len(b.args):
            out["kernels"].append(
                {
                    "node": list(path),
                    "kernel": name_a if name_a == name_b else [name_a, name_b],
                    "launch_identical": launch,
                    **({} if launch else {"launch": [[x.grid, x.block, x.shared_mem] for x in (a, b)]}),
                    "arg_bytes": [len(a.args), len(b.args)],
                    "words": words,
                }
            )
    return out


def _variables(meta: schema.GraphMeta) -> dict[str, str]:
    return {f"{img.sha256[:12]}:{v.name}": v.sha256 for img in meta.images for v in img.variables or ()}


def _peers(meta: schema.GraphMeta) -> dict[str, Any]:
    """The other processes' memory mapped into the region, in all: where two ranks' layouts part, a rank that maps
    more of its peers' buffers (or maps them elsewhere) moves everything allocated after them."""
    spans = [(p.offset, p.size) for p in meta.peers]
    return {
        "count": len(spans),
        "bytes": sum(size for _, size in spans),
        "offsets": [min(o for o, _ in spans), max(o + n for o, n in spans)] if spans else None,
    }


def diff_archives(a: Path, b: Path) -> dict[str, Any]:
    graphs_a, graphs_b = _graphs(a), _graphs(b)
    both = sorted(set(graphs_a) & set(graphs_b))
    out: dict[str, Any] = {
        "only_a": sorted(set(graphs_a) - set(graphs_b)),
        "only_b": sorted(set(graphs_b) - set(graphs_a)),
        "graphs": {},
    }
    images_a: set[str] = set()
    images_b: set[str] = set()
    variables_a: dict[str, str] = {}
    variables_b: dict[str, str] = {}
    stores = (archive.GraphStore(), archive.GraphStore())
    for name in both:
        out["graphs"][name] = diff_graph(graphs_a[name], graphs_b[name], stores)
        meta_a, _ = archive.read_graph(graphs_a[name], verify=False, store=stores[0])
        meta_b, _ = archive.read_graph(graphs_b[name], verify=False, store=stores[1])
        images_a |= {i.sha256 for i in meta_a.images}
        images_b |= {i.sha256 for i in meta_b.images}
        variables_a |= _variables(meta_a)
        variables_b |= _variables(meta_b)
        out.setdefault("region", [[meta_a.region.base, meta_a.region.size], [meta_b.region.base, meta_b.region.size]])
        out.setdefault("rank", [r.to_json() if r else None for r in (meta_a.rank, meta_b.rank)])
        out.setdefault(
            "peers_identical",
            [(p.offset, p.size) for p in meta_a.peers] == [(p.offset, p.size) for p in meta_b.peers],
        )
        out.setdefault("peers", [_peers(meta_a), _peers(meta_b)])
    out["images"] = {"both": len(images_a & images_b), "only_a": sorted(images_a - images_b),
                     "only_b": sorted(images_b - images_a)}  # fmt: skip
    out["variables"] = {
        name: [variables_a.get(name), variables_b.get(name)]
        for name in sorted(set(variables_a) | set(variables_b))
        if variables_a.get(name) != variables_b.get(name)
    }
    return out


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _files(directory: Path) -> dict[str, tuple[int, Path]]:
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = Path(root) / name
            out[str(path.relative_to(directory))] = (path.stat().st_size, path)
    return out


def shared_bytes(a: Path, b: Path) -> dict[str, Any]:
    """How much of two archives is the same file, byte for byte (by path and content): what one copy per
    deployment would store once. Sizes and contents are compared; the files are read only where sizes agree."""
    files_a, files_b = _files(a), _files(b)
    same = [rel for rel in set(files_a) & set(files_b)
            if files_a[rel][0] == files_b[rel][0] and _digest(files_a[rel][1]) == _digest(files_b[rel][1])]  # fmt: skip
    kinds: Counter[str] = Counter()
    for rel in set(files_a) - set(same):
        kinds[rel.split(os.sep, 1)[0] if os.sep in rel else "top level"] += files_a[rel][0]
    largest = sorted(set(files_a) - set(same), key=lambda rel: -files_a[rel][0])[:5]
    return {
        "bytes": [sum(n for n, _ in files_a.values()), sum(n for n, _ in files_b.values())],
        "files": [len(files_a), len(files_b)],
        "identical_files": len(same),
        "identical_bytes": sum(files_a[rel][0] for rel in same),
        "differing_bytes_of_a_by_folder": dict(kinds.most_common()),
        "largest_differing_files_of_a": [[rel, files_a[rel][0]] for rel in largest],
    }


def summary(report: dict[str, Any]) -> str:
    kinds: Counter[str] = Counter()
    shifts: Counter[int] = Counter()
    spans: dict[int, list[int]] = {}  # shift -> the lowest and highest offset in A's region it moved
    halves: Counter[str] = Counter()
    kernels = nodes = identical = members = members_identical = launches = 0
    for graph in report["graphs"].values():
        if graph.get("member"):
            members += 1
            members_identical += graph["delta_identical"]
            continue
        nodes += graph["nodes"][0]
        identical += graph["record_identical"]
        for k in graph["kernels"]:
            kernels += 1
            launches += not k["launch_identical"]
            kinds.update(w["kind"] for w in k["words"])
            shifts.update(w["shift"] for w in k["words"] if "shift" in w)
            for w in k["words"]:
                if "at_a" in w:
                    low, high = spans.setdefault(w["shift"], [w["at_a"], w["at_a"]])
                    spans[w["shift"]] = [min(low, w["at_a"]), max(high, w["at_a"])]
            halves.update(w["halves"] for w in k["words"] if "halves" in w)
    lines = [
        f"graphs compared {len(report['graphs']) - members} (records identical {identical}), nodes {nodes}, "
        f"kernel nodes that differ {kernels}; members compared by their deltas {members} (identical "
        f"{members_identical})",
        "differing argument words: " + (", ".join(f"{n} {kind}" for kind, n in kinds.most_common()) or "none"),
        "region words moved, by shift (B's offset - A's): "
        + (
            ", ".join(
                f"{n} by {shift:+#x} (A's offsets {spans[shift][0]:#x}-{spans[shift][1]:#x})"
                for shift, n in shifts.most_common(6)
            )
            or "none"
        )
        + "; other words, which half differs: "
        + (", ".join(f"{n} {half}" for half, n in halves.most_common()) or "none")
        + f"; kernel nodes launched otherwise (grid, block, shared memory): {launches}",
        f"images: {report['images']['both']} in both, {len(report['images']['only_a'])} only in A, "
        f"{len(report['images']['only_b'])} only in B; module variables that differ: "
        + (", ".join(report["variables"]) or "none"),
        f"rank: {report.get('rank')}, peer mappings identical: {report.get('peers_identical')}",
        *(
            f"peer mappings of {side}: {p['count']}, {p['bytes'] / 2**20:.1f} MiB"
            + (f" at region offsets {p['offsets'][0]:#x}-{p['offsets'][1]:#x}" if p["offsets"] else "")
            for side, p in zip("AB", report.get("peers") or [], strict=False)
        ),
    ]
    files = report.get("files")
    if files:
        total_a, total_b = files["bytes"]
        together = (total_a + total_b - files["identical_bytes"]) / max(total_a, 1)
        lines.append(
            f"files: {files['identical_files']} of {files['files'][0]} / {files['files'][1]} identical, "
            f"{files['identical_bytes'] / 2**20:.1f} MiB of {total_a / 2**20:.1f} / {total_b / 2**20:.1f} MiB; "
            f"both with one copy of what is shared: {together:.2f}x A's size; A's differing bytes by folder: "
            f"{files['differing_bytes_of_a_by_folder']}"
        )
        largest = files.get("largest_differing_files_of_a") or []
        if largest:
            lines.append(
                "A's largest differing files: " + ", ".join(f"{rel} {n / 2**20:.1f} MiB" for rel, n in largest)
            )
    for name, graph in sorted(report["graphs"].items()):
        for k in graph.get("kernels", [])[:8]:
            shown = "; ".join(f"+{w['offset']} {w['a']} / {w['b']} ({w['kind']})" for w in k["words"][:6])
            if "launch" in k:
                shown = f"launch {k['launch'][0]} / {k['launch'][1]}; " + shown
            lines.append(f"  {name} node {k['node']} {str(k['kernel'])[:60]}: {shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--json", type=Path, help="also write the whole comparison here")
    args = parser.parse_args(argv)
    report = diff_archives(args.a, args.b)
    report["files"] = shared_bytes(args.a, args.b)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print(summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
