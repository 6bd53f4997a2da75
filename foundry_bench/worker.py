"""One side of the cold-start benchmark, in a process of its own (started by foundry_bench.runner).

    python -m foundry_bench.worker native SHAPE VARIANT OUT   warm up, capture, SAVE, measure
    python -m foundry_bench.worker load   SHAPE VARIANT OUT   LOAD in the background, measure

Both build the same model with the same seed, so their allocations land at the same addresses. The
environment variable FOUNDRY_BENCH_SPAWN carries the parent's clock at spawn time, so "process start
to first decode step" includes interpreter and torch start-up.

Settings for measuring LOAD itself (`foundry bench --threads/--images-after-start` set the first two;
scripts/load_matrix.sh sets them directly): FOUNDRY_BENCH_THREADS (start_graph_builds'
num_threads, 8), FOUNDRY_BENCH_MODULES_FIRST (1: load_cuda_modules_and_libraries at process start, as
the seed README does; 0: every image loads after start_graph_builds), FOUNDRY_BENCH_BUILDERS (the
loader's cap on builder threads, foundry.load.LIMITS.builders), FOUNDRY_BENCH_READERS
(the loader's cap on reader threads), FOUNDRY_BENCH_SMAPS (print which mappings LOAD grew),
FOUNDRY_BENCH_LOAD_ONLY (stop after LOAD, skip the replay measurements and probes). FOUNDRY_WARM_HEAP=0
(foundry.load.threads) turns off the builders' heap warm-up, for comparison. FOUNDRY_BENCH_SAVE_PROFILE=PATH
writes cProfile's table of SAVE (by own time, then cumulative) to PATH, the raw statistics to PATH.pstats.
"""

from __future__ import annotations

import cProfile
import hashlib
import io
import json
import os
import pstats
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

import foundry
from foundry import probe, save_phases, startup_phases
from foundry.probe import LIMITS, codec, tensor_at

from . import probes
from .model import QwenDecoder
from .shapes import SHAPES, vllm_batch_sizes

BASE = 0x600000000000
REGION = "512GB"
LATENCY_REPS = 20


def _since_spawn() -> float:
    return time.time() - float(os.environ.get("FOUNDRY_BENCH_SPAWN", time.time()))


# Process start to this module's imports done (Python, torch, foundry): the first step of the cold path.
IMPORTED_S = _since_spawn()


def _context() -> float:
    """Seconds to initialise CUDA and create this process's context (no allocation: one made before the
    region is set would land outside it)."""
    t0 = time.perf_counter()
    torch.cuda.init()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def _progress(tag: str, message: str) -> None:
    print(f"[{tag}] {message}", flush=True)


def _build(shape: str) -> tuple[QwenDecoder, torch.Tensor, torch.Tensor]:
    cfg = SHAPES[shape]
    model = QwenDecoder(cfg, seed=0)
    ids = torch.zeros(cfg.max_batch, dtype=torch.int64, device="cuda")
    pos = torch.zeros(cfg.max_batch, dtype=torch.int64, device="cuda")
    return model, ids, pos


def _fill(model: QwenDecoder, ids: torch.Tensor, pos: torch.Tensor, seed: int) -> None:
    """Same inputs and an empty KV cache in both processes, so replays must agree byte for byte."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    ids.copy_(torch.randint(0, model.cfg.vocab, ids.shape, generator=gen, device="cuda"))
    pos.copy_(torch.randint(1, model.cfg.max_seq, pos.shape, generator=gen, device="cuda"))
    model.k_cache.zero_()
    model.v_cache.zero_()


def _digests(graphs: dict[int, tuple[Any, torch.Tensor]]) -> dict[str, str]:
    out = {}
    for bs, (g, hidden) in graphs.items():
        g.replay()
        torch.cuda.synchronize()
        out[str(bs)] = hashlib.sha256(hidden.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()
    return out


def _latency_us(graph: Any) -> float:
    """Median replay time of one graph (see probes.time_interleaved)."""
    return probes.time_interleaved({"graph": graph.replay}, LATENCY_REPS)["graph"]


class _DirectLaunch:
    """A captured torch graph's exec launched with cuGraphLaunch, as Foundry launches loaded graphs."""

    def __init__(self, graph: foundry.CUDAGraph) -> None:
        self.exec = int(graph._require_torch().raw_cuda_graph_exec())

    def replay(self) -> None:
        codec.launch(self.exec, torch.cuda.current_stream().cuda_stream)


def _write_profile(profile: cProfile.Profile, path: Path) -> None:
    """The table at ``path``, the raw statistics beside it (``.pstats``, for pstats to read elsewhere)."""
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(60)
    stats.sort_stats("cumulative").print_stats(60)
    path.write_text(text.getvalue())
    profile.dump_stats(str(path) + ".pstats")


def native(shape: str, variant: str, out: Path, sizes: list[int]) -> dict[str, Any]:
    tag = f"{shape} {variant} native"
    cold: dict[str, Any] = {"import_s": IMPORTED_S, "context_s": _context()}
    t0 = time.perf_counter()
    foundry.set_allocation_region(BASE, REGION)
    model, ids, pos = _build(shape)
    torch.cuda.synchronize()
    cold["model_s"] = time.perf_counter() - t0
    fn = torch.compile(model, dynamic=True) if variant == "compiled" else model
    _fill(model, ids, pos, 0)
    torch.cuda.synchronize()
    graphs: dict[int, tuple[foundry.CUDAGraph, torch.Tensor]] = {}
    warmup_s = capture_s = 0.0
    t_start = time.perf_counter()
    with torch.no_grad():
        for n, bs in enumerate(sorted(sizes, reverse=True)):  # largest first, as vLLM captures
            t0 = time.perf_counter()
            fn(ids[:bs], pos[:bs])
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            g = foundry.CUDAGraph()
            with foundry.graph(g):
                hidden = fn(ids[:bs], pos[:bs])
            g.replay()  # PyTorch instantiates on the first replay
            torch.cuda.synchronize()
            warmup_s += t1 - t0
            capture_s += time.perf_counter() - t1
            graphs[bs] = (g, hidden)
            if n % 8 == 0 or n == len(sizes) - 1:
                _progress(
                    tag, f"warmed up and captured {n + 1}/{len(sizes)} graphs ({time.perf_counter() - t_start:.1f} s)"
                )
    native_s = time.perf_counter() - t_start
    graphs[sizes[0]][0].replay()
    torch.cuda.synchronize()
    first_step_s = _since_spawn()

    archive = out / "archive"
    # What SAVE did beside the captures (each graph's record read on a worker: foundry.save.beside).
    beside_s = {k: v for k, v in save_phases().seconds.items() if k.endswith("_beside")}
    save_phases().reset()
    profile_to = os.environ.get("FOUNDRY_BENCH_SAVE_PROFILE")
    profile = cProfile.Profile() if profile_to else None
    t0 = time.perf_counter()
    if profile is not None:
        profile.enable()
    with probes.GcTime() as save_gc:
        # In the archive directory, as an engine saves its graphs: there they are stored once, in the graph bundle
        # start-up reads with one read (docs/FORMAT.md, "Graph bundle").
        for bs, (g, hidden) in graphs.items():
            g.save(archive / f"bs{bs}.json", output_tensors=hidden, archive_dir=archive)
        manifest = foundry.save_graph_manifest(archive)
    save_s = time.perf_counter() - t0
    if profile is not None and profile_to:
        profile.disable()
        _write_profile(profile, Path(profile_to))
    phases = save_phases()
    _progress(tag, f"saved {len(graphs)} graphs in {save_s:.2f} s")

    _fill(model, ids, pos, 1)
    ordered = {bs: graphs[bs] for bs in sizes}
    digests = _digests(ordered)
    _fill(model, ids, pos, 1)
    deterministic = _digests(ordered) == digests  # the same replays again: is native itself repeatable?
    latency = {str(bs): _latency_us(g) for bs, (g, _) in ordered.items()}
    # The same native execs launched directly (no torch replay bookkeeping), to separate the two.
    direct = {str(bs): _latency_us(_DirectLaunch(g)) for bs, (g, _) in ordered.items()}
    listed = {g.name: g.nodes for g in manifest.graphs}
    nodes = {str(bs): listed[f"bs{bs}"] for bs in sizes}
    same_process = probes.same_process_latency(ordered, out)
    return {
        "cold": cold,
        "save_phases_s": dict(phases.seconds),
        "save_phases_beside_capture_s": beside_s,
        "save_gc": save_gc.report(),
        "save_phase_faults": dict(phases.faults),
        "save_phase_counts": dict(phases.counts),
        "same_process_us": same_process,
        "native_warmup_s": warmup_s,
        "native_capture_s": capture_s,
        "native_warmup_capture_s": native_s,
        "first_step_s": first_step_s,
        "save_s": save_s,
        "digests": digests,
        "deterministic": deterministic,
        "latency_us": latency,
        "latency_direct_us": direct,
        "nodes": nodes,
        "groups": _group_report(manifest),
        "archive_bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p.suffix != ".pt"),
        "machine": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda},
    }


def _group_report(manifest: Any) -> dict[str, Any]:
    """How the graphs grouped, and whether topology or kernels' cluster shapes split them."""
    names = [g.name for g in manifest.graphs]
    return {
        "groups": [[names[g.template], *[names[m] for m in g.members]] for g in manifest.groups],
        "varying_nodes": [len(g.varying or ()) for g in manifest.groups],
        "distinct_topologies": len({g.topology for g in manifest.graphs}),
    }


def load(shape: str, variant: str, out: Path, sizes: list[int]) -> dict[str, Any]:
    tag = f"{shape} {variant} load"
    cold: dict[str, Any] = {"import_s": IMPORTED_S, "context_s": _context()}
    modules_s = 0.0
    if os.environ.get("FOUNDRY_BENCH_MODULES_FIRST", "1") == "1":
        # The seed README's order: the archive's kernel images load at process start, before the model
        # (on the caller's thread only what must precede it; the driver work goes on in the background
        # while the model is built). Timed apart (modules_s), and inside "process start to first decode
        # step" either way.
        t0 = time.perf_counter()
        foundry.load_cuda_modules_and_libraries(out / "archive")
        modules_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    foundry.set_allocation_region(BASE, REGION)
    model, ids, pos = _build(shape)
    torch.cuda.synchronize()
    cold["model_s"] = time.perf_counter() - t0
    paths = [out / "archive" / f"bs{bs}.json" for bs in sizes]
    threads = int(os.environ.get("FOUNDRY_BENCH_THREADS", "8"))  # scripts/load_matrix.sh varies it
    if os.environ.get("FOUNDRY_BENCH_BUILDERS"):  # and the loader's cap on builder threads
        LIMITS.builders = int(os.environ["FOUNDRY_BENCH_BUILDERS"])
    if os.environ.get("FOUNDRY_BENCH_READERS"):
        LIMITS.readers = int(os.environ["FOUNDRY_BENCH_READERS"])
    smaps = probes.rss_by_mapping() if os.environ.get("FOUNDRY_BENCH_SMAPS") else {}
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    pending = foundry.CUDAGraph.start_graph_builds(paths, num_threads=threads, defer_dedicated=True)
    start_s = time.perf_counter() - t0
    first = foundry.CUDAGraph.finish_one_graph_load(pending, 0)
    load_first_s = time.perf_counter() - t0
    loaded = foundry.CUDAGraph.finish_graph_loads(pending)
    load_all_s = time.perf_counter() - t0
    # Page faults while LOAD ran: first touches of new heap pages (foundry.load.threads).
    load_minor_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    if smaps:
        for name, kb in probes.rss_growth(smaps, probes.rss_by_mapping()):
            print(f"rss growth {kb:8d} kB  {name}", flush=True)
    first[0].replay()
    torch.cuda.synchronize()
    first_step_s = _since_spawn()
    cold["startup_phases_s"] = dict(startup_phases().seconds)
    # Start-up's timeline but the per-image reads: (step, thread, start, end), seconds from its first call.
    cold["startup_spans"] = [s for s in startup_phases().spans if s[0] != "image_read"]
    _progress(tag, f"{len(paths)} graphs replayable {load_all_s * 1000:.0f} ms after start_graph_builds")
    graphs = {bs: loaded[i] for i, bs in enumerate(sizes)}
    if os.environ.get("FOUNDRY_BENCH_LOAD_ONLY"):  # timings of LOAD alone (repeated loads in one call)
        return {"modules_s": modules_s, "load_first_s": load_first_s, "load_all_s": load_all_s,
                "load_minor_faults": load_minor_faults, "timings": pending.timings,
                "trace": pending.phases.spans, "cold": cold}  # fmt: skip

    _fill(model, ids, pos, 1)
    first_replay = probes.first_replays(graphs, pending)  # before any other replay: each graph's very first
    _fill(model, ids, pos, 1)
    digests_template = _digests(graphs)
    latency_template = {str(bs): _latency_us(g) for bs, (g, _) in graphs.items()}
    exec_update = probes.probe_exec_update(pending)
    differences = probe.varying_differences(pending)
    switch_penalty = probes.probe_switch_penalty(pending)
    switch_us = {}
    for bs, (g, _) in list(graphs.items())[:8]:
        other = graphs[sizes[-1] if bs != sizes[-1] else sizes[0]][0]
        other.replay()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        switch_us[str(bs)] = (time.perf_counter() - t1) * 1e6

    t1 = time.perf_counter()
    pending.build_dedicated()
    pending.wait_all()
    dedicated_s = time.perf_counter() - t1
    _progress(tag, f"members' own execs built in {dedicated_s:.2f} s (in the background)")
    _fill(model, ids, pos, 1)
    first_replay_own = probes.first_replays(graphs, pending)  # each own exec's very first launch
    _fill(model, ids, pos, 1)
    digests = _digests(graphs)
    latency = {str(bs): _latency_us(g) for bs, (g, _) in graphs.items()}
    t1 = time.perf_counter()
    outputs = [tensor_at(o) for o in probe.outputs(pending)]
    tensor_at_us = (time.perf_counter() - t1) / max(1, len(outputs)) * 1e6
    build_probe = probes.probe_build(pending)
    driver_probe = probes.probe_driver(pending)
    process_probe = probes.probe_process(model, ids, pos, graphs) if variant == "eager" else {}
    return {
        "cold": cold,
        "first_replay_us": {bs: r["us"] for bs, r in first_replay.items()},
        "first_replay": first_replay,
        "first_replay_own": first_replay_own,
        "exec_update_probe": exec_update,
        "varying_differences": differences,
        "switch_penalty": switch_penalty,
        "modules_s": modules_s,
        "trace": pending.phases.spans,
        "tensor_at_us": tensor_at_us,
        "build_probe": build_probe,
        "driver_probe": driver_probe,
        "process_probe_us": process_probe,
        "start_s": start_s,
        "load_first_s": load_first_s,
        "load_all_s": load_all_s,
        "load_minor_faults": load_minor_faults,
        "dedicated_s": dedicated_s,
        "first_step_s": first_step_s,
        "timings": pending.timings,
        "groups": probe.group_count(pending),
        "digests_template": digests_template,
        "digests": digests,
        "latency_template_us": latency_template,
        "latency_us": latency,
        "switch_us": switch_us,
    }


def main() -> None:
    mode, shape, variant, out = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    sizes = [int(s) for s in sys.argv[5].split(",")] if len(sys.argv) > 5 else vllm_batch_sizes()
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    result = (native if mode == "native" else load)(shape, variant, out, sizes)
    (out / f"{mode}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
