"""SAVE or LOAD every GPU workload, in a process of its own (run under `foundry run`).

    python roundtrip.py save DIR [names...]   capture natively, record outputs, write the archive
    python roundtrip.py load DIR              rebuild from the archive, replay, compare bit for bit

Both modes build every workload's persistent state first, in the same order, so that LOAD's
allocations land where SAVE's did. Before each replay both set the inputs from the same seed and the
default generator to the same offset, so outputs must match byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

import foundry
from foundry.load.source import read_source
from foundry.native import codec
from foundry.records import parse_delta, parse_record
from tests.gpu.workloads import WORKLOADS, WorkloadState

BASE = 0x600000000000
REGION = "64GB"


def _flat(obj: Any) -> list[torch.Tensor]:
    return [obj] if isinstance(obj, torch.Tensor) else [t for o in obj for t in _flat(o)]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.uint8).cpu()


def save(out_dir: Path, names: list[str]) -> dict[str, Any]:
    archive = out_dir / "archive"
    states = {w.name: w.build() for w in WORKLOADS if not names or w.name in names}
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    results: dict[str, Any] = {}
    keep = []
    for wname, state in states.items():
        for gname, body in state.graphs.items():
            key = f"{wname}_{gname}" if gname else wname
            try:
                state.reset(0)
                body()
                body()
                torch.cuda.synchronize()
                g = foundry.CUDAGraph()
                t0 = time.perf_counter()
                with foundry.graph(g):
                    out = body()
                capture_s = time.perf_counter() - t0
                offsets = []
                expected = []
                for seed in (0, 1):
                    state.reset(seed)
                    offsets.append(gen.get_offset())
                    g.replay()
                    torch.cuda.synchronize()
                    expected.append([_bytes(t) for t in _flat(out)])
                    if seed == 0:
                        t0 = time.perf_counter()
                        meta = g.save(archive / f"{key}.json", output_tensors=out, archive_dir=archive)
                        save_s = time.perf_counter() - t0
                torch.save({"offsets": offsets, "expected": expected}, out_dir / f"{key}.expected.pt")
                keep.append((g, out))
                results[key] = {
                    "saved": True,
                    "nodes": meta.stats_dict().get("nodes"),
                    "kernels": meta.stats_dict().get("kernel"),
                    "rng": meta.rng is not None,
                    "capture_s": capture_s,
                    "save_s": save_s,
                }
            except Exception as exc:  # each workload reports on its own
                results[key] = {
                    "saved": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc(),
                }
    if any(r["saved"] for r in results.values()):
        foundry.save_graph_manifest(archive)
    return results


def _edges(record: Any) -> list[tuple[int, ...]]:
    return sorted(dataclasses.astuple(e) for e in record.edges)


def _reextract(key: str, g: Any) -> bool:
    """The rebuilt graph, walked again, must be the saved record: same nodes, same parameters, same
    edges and edge data (edges compared as a set: LOAD adds them grouped by edge data)."""
    rebuilt = parse_record(codec.extract(g._runner.graph)[0])
    src = read_source(g._runner.json_path)
    if src.template is None:
        saved = parse_record(src.payload)
        return rebuilt.nodes == saved.nodes and _edges(rebuilt) == _edges(saved)
    template = parse_record(src.template.payload)
    overrides = dict(parse_delta(src.payload).overrides)
    same_edges = _edges(rebuilt) == _edges(template)

    # A member's function indices follow its own table; compare everything else node by node.
    def key_of(node: Any) -> Any:
        return node if not hasattr(node, "function_index") else (node.grid, node.block, node.args, node.attrs)

    expected = [overrides.get(i, n) for i, n in enumerate(template.nodes)]
    return same_edges and [key_of(n) for n in rebuilt.nodes] == [key_of(n) for n in expected]


def load(out_dir: Path, modules_s: float) -> dict[str, Any]:
    archive = out_dir / "archive"
    saved = json.loads((out_dir / "save.json").read_text())
    states = {w.name: w.build() for w in WORKLOADS if any(k == w.name or k.startswith(w.name + "_") for k in saved)}
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    results: dict[str, Any] = {"_modules_s": modules_s}
    # Every graph is loaded before anything else allocates: later graphs were saved with more of the
    # region in use, and LOAD maps all of it back.
    loaded: dict[str, tuple[WorkloadState, Any, Any]] = {}
    for wname, state in states.items():
        for gname in state.graphs:
            key = f"{wname}_{gname}" if gname else wname
            if not saved.get(key, {}).get("saved"):
                continue
            try:
                t0 = time.perf_counter()
                g, out = foundry.CUDAGraph.load(archive / f"{key}.json")
                results[key] = {"loaded": True, "load_s": time.perf_counter() - t0, "reextract": _reextract(key, g)}
                loaded[key] = (state, g, out)
            except Exception as exc:
                results[key] = {
                    "loaded": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc(),
                }
    for key, (state, g, out) in loaded.items():
        try:
            ref = torch.load(out_dir / f"{key}.expected.pt")
            same = []
            for seed in (0, 1):
                state.reset(seed)
                gen.set_offset(ref["offsets"][seed])
                g.replay()
                torch.cuda.synchronize()
                got = [_bytes(t) for t in _flat(out)]
                expected = ref["expected"][seed]
                same.append(len(got) == len(expected) and all(map(torch.equal, got, expected)))
            results[key]["identical"] = same
        except Exception as exc:
            results[key].update(error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc(), identical=None)
    return results


def load_background(out_dir: Path) -> dict[str, Any]:
    """Every saved graph through start_graph_builds: replayed on shared template execs first, then on
    their own execs; both must match the native outputs byte for byte."""
    archive = out_dir / "archive"
    saved = json.loads((out_dir / "save.json").read_text())
    states = {w.name: w.build() for w in WORKLOADS if any(k == w.name or k.startswith(w.name + "_") for k in saved)}
    keys = [
        (f"{w}_{g}" if g else w, state)
        for w, state in states.items()
        for g in state.graphs
        if saved.get(f"{w}_{g}" if g else w, {}).get("saved")
    ]
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    t0 = time.perf_counter()
    pending = foundry.CUDAGraph.start_graph_builds([archive / f"{k}.json" for k, _ in keys], defer_dedicated=True)
    graphs = foundry.CUDAGraph.finish_graph_loads(pending)
    results: dict[str, Any] = {"_all_replayable_s": time.perf_counter() - t0, "_groups": len(pending.groups)}
    for phase in ("template", "dedicated"):
        if phase == "dedicated":
            pending.build_dedicated()
            pending.wait_all()
        for (key, state), (g, out) in zip(keys, graphs, strict=True):
            ref = torch.load(out_dir / f"{key}.expected.pt")
            same = []
            for seed in (0, 1):
                state.reset(seed)
                gen.set_offset(ref["offsets"][seed])
                g.replay()
                torch.cuda.synchronize()
                got = [_bytes(t) for t in _flat(out)]
                same.append(
                    len(got) == len(ref["expected"][seed]) and all(map(torch.equal, got, ref["expected"][seed]))
                )
            results.setdefault(key, {})[phase] = same
    return results


def main() -> None:
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    torch.manual_seed(0)
    torch.cuda.init()
    modules_s = 0.0
    if mode == "loadbg":
        foundry.set_allocation_region(BASE, REGION)
        results = load_background(out_dir)
        (out_dir / "loadbg.json").write_text(json.dumps(results, indent=1))
        print(json.dumps(results, indent=1))
        return
    if mode == "load":  # as the seed README does: images first, then the region
        t0 = time.perf_counter()
        foundry.load_cuda_modules_and_libraries(out_dir / "archive")
        modules_s = time.perf_counter() - t0
    foundry.set_allocation_region(BASE, REGION)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = save(out_dir, sys.argv[3:]) if mode == "save" else load(out_dir, modules_s)
    (out_dir / f"{mode}.json").write_text(json.dumps(results, indent=1))
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "trace"} if isinstance(v, dict) else v
                      for k, v in results.items()}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
