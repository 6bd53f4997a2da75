"""One side of the cold-start benchmark, in a process of its own (started by foundry.bench.runner).

    python -m foundry.bench.worker native SHAPE VARIANT OUT   warm up, capture, SAVE, measure
    python -m foundry.bench.worker load   SHAPE VARIANT OUT   LOAD in the background, measure

Both build the same model with the same seed, so their allocations land at the same addresses. The
environment variable FOUNDRY_BENCH_SPAWN carries the parent's clock at spawn time, so "process start
to first decode step" includes interpreter and torch start-up.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import foundry
from foundry.bench.model import SHAPES, QwenDecoder, vllm_batch_sizes
from foundry.capture.tensors import tensor_at
from foundry.graphs import codec

BASE = 0x600000000000
REGION = "512GB"
LATENCY_REPS = 20
PROBE_SIZES = (1, 8, 64, 256, 512)
PROBE_ROUNDS = 15


def _progress(tag: str, message: str) -> None:
    print(f"[{tag}] {message}", flush=True)


def _since_spawn() -> float:
    return time.time() - float(os.environ.get("FOUNDRY_BENCH_SPAWN", time.time()))


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


def _latency_us(graph: Any, reps: int = LATENCY_REPS) -> float:
    """Median replay time (CUDA events, warm, one replay per measurement)."""
    for _ in range(3):
        graph.replay()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        graph.replay()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end, strict=True)) * 1000


class _DirectLaunch:
    """A captured torch graph's exec launched with cuGraphLaunch, as Foundry launches loaded graphs."""

    def __init__(self, graph: foundry.CUDAGraph) -> None:
        self.exec = int(graph._require_torch().raw_cuda_graph_exec())

    def replay(self) -> None:
        codec.launch(self.exec, torch.cuda.current_stream().cuda_stream)


def _same_process_latency(graphs: dict[int, tuple[Any, torch.Tensor]], out: Path) -> dict[str, dict[str, float]]:
    """Each native graph against an exec that LOAD's code builds from its archived record, in this one
    process, interleaved round by round: the same memory, GPU state and clocks for both, so the ratio
    is the exec's alone. (Across two processes, replay speed differs by up to ~10% in either direction
    for the same exec; the LOAD worker's process probe shows it.)"""
    from foundry.graphs.load import build_exec, load_images, read_source, source_images

    stream = torch.cuda.current_stream().cuda_stream
    result: dict[str, dict[str, float]] = {}
    for bs, (g, _) in graphs.items():
        src = read_source(out / f"bs{bs}.json")
        for sha, (directory, _size) in source_images(src).items():
            load_images(directory, [sha])
        rebuilt, rebuilt_exec = build_exec(src)
        loaded = lambda e=rebuilt_exec: codec.launch(e, stream)  # noqa: E731
        result[str(bs)] = _time_interleaved({"native": g.replay, "loaded": loaded})
        codec.destroy_exec(rebuilt_exec)
        codec.destroy_graph(rebuilt)
    return result


def _time_interleaved(runs: dict[str, Any]) -> dict[str, float]:
    """Median replay time per entry, measured round by round in turn (CUDA events)."""
    for fn in runs.values():
        for _ in range(3):
            fn()
    times: dict[str, list[Any]] = {k: [] for k in runs}
    for _ in range(PROBE_ROUNDS):
        for name, fn in runs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            times[name].append((a, b))
    torch.cuda.synchronize()
    return {k: statistics.median(a.elapsed_time(b) for a, b in v) * 1000 for k, v in times.items()}


def _probe_build(pending: Any) -> dict[str, dict[str, float]]:
    """Builds and instantiates every group's template again with 1, 4 and 8 threads: does the driver
    let graph building and instantiation run in parallel, and what does each cost per node?"""
    from concurrent.futures import ThreadPoolExecutor

    from foundry.driver import call, current_context

    context = current_context()
    groups = pending.groups

    def one(g: Any) -> tuple[int, int, float, float]:
        call("cuCtxSetCurrent", context)
        t0 = time.perf_counter()
        graph, _nodes = codec.build_with_nodes(g.template.payload, g.template_functions, g.template.node_count)
        t1 = time.perf_counter()
        exec_ = codec.instantiate(graph)
        return graph, exec_, t1 - t0, time.perf_counter() - t1

    nodes = sum(g.template.node_count for g in groups)
    out = {}
    for threads in (1, 4, 8):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            res = list(pool.map(one, groups))
        wall = time.perf_counter() - t0
        out[str(threads)] = {
            "wall_s": wall,
            "build_thread_s": sum(r[2] for r in res),
            "instantiate_thread_s": sum(r[3] for r in res),
            "build_us_per_node": sum(r[2] for r in res) / nodes * 1e6,
            "instantiate_us_per_node": sum(r[3] for r in res) / nodes * 1e6,
        }
        for graph, exec_, _, _ in res:
            codec.destroy_exec(exec_)
            codec.destroy_graph(graph)
    return out


def _probe_driver(pending: Any) -> dict[str, float]:
    """What the driver charges for LOAD's image work: every image the graphs use is loaded once more
    (under another registry key) and each of its kernels looked up, timed; and how fast this machine
    hashes (SHA-256 is what LOAD checks images and records with)."""
    import hashlib
    import zlib

    from foundry.archive import open_image
    from foundry.graphs.load import source_images
    from foundry.kernels import registry

    images: dict[str, tuple[Path, int]] = {}
    kernels: dict[str, set[str]] = {}
    for h in pending.handles:
        images.update(source_images(h.source))
        for s in (h.source, h.source.template):
            for ref in s.meta.functions if s is not None else ():
                kernels.setdefault(ref.image, set()).add(ref.name)
    out = {"images": len(images), "image_bytes": sum(n for _, n in images.values()), "kernels": 0.0}
    load_s = first_get_s = 0.0
    blobs = []
    for sha, (directory, _size) in images.items():
        data = open_image(directory, sha, False)
        blobs.append(bytes(data))
        t0 = time.perf_counter()
        registry.load_image("probe-" + sha, data)
        t1 = time.perf_counter()
        for name in sorted(kernels.get(sha, ())):
            registry.loaded_function(registry.KernelRef("probe-" + sha, name))
            out["kernels"] += 1
        t2 = time.perf_counter()
        load_s += t1 - t0
        first_get_s += t2 - t1
    blob = b"".join(blobs)
    out.update(library_load_s=load_s, kernel_first_get_s=first_get_s)
    out.update(_probe_module_api(blobs, [sorted(kernels.get(sha, ())) for sha in images]))
    hashes: dict[str, Any] = {
        "sha256": lambda b: hashlib.sha256(b).digest(),
        "blake2b": lambda b: hashlib.blake2b(b).digest(),
        "crc32": zlib.crc32,
    }
    for name, fn in hashes.items():
        t0 = time.perf_counter()
        fn(blob)
        out[f"{name}_MBps"] = len(blob) / (time.perf_counter() - t0) / 1e6
    return out


def _probe_module_api(blobs: list[bytes], names: list[list[str]]) -> dict[str, float]:
    """The same images through cuModuleLoadData + cuModuleGetFunction (libcuda directly), to compare
    with the library API LOAD uses."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    module_s = get_s = 0.0
    for blob, kernel_names in zip(blobs, names, strict=True):
        buf = ctypes.create_string_buffer(blob, len(blob))
        mod = ctypes.c_void_p()
        t0 = time.perf_counter()
        rc = cuda.cuModuleLoadData(ctypes.byref(mod), buf)
        t1 = time.perf_counter()
        if rc:
            return {"module_api_error": float(rc)}
        for name in kernel_names:
            fn = ctypes.c_void_p()
            cuda.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode())
        module_s += t1 - t0
        get_s += time.perf_counter() - t1
    return {"module_load_s": module_s, "module_get_function_s": get_s}


def _probe_process(
    model: QwenDecoder, ids: torch.Tensor, pos: torch.Tensor, graphs: dict[int, tuple[Any, torch.Tensor]]
) -> dict[str, dict[str, float]]:
    """Native graphs captured in this (LOAD) process, timed against the loaded ones: separates the
    exec from the process it runs in (the native process may replay its graphs at another speed)."""
    result = {}
    with torch.no_grad():
        for bs in PROBE_SIZES:
            if bs not in graphs:
                continue
            model(ids[:bs], pos[:bs])
            torch.cuda.synchronize()
            g = foundry.CUDAGraph()
            with foundry.graph(g):
                model(ids[:bs], pos[:bs])
            g.replay()
            torch.cuda.synchronize()
            result[str(bs)] = _time_interleaved({"loaded": graphs[bs][0].replay, "native_here": g.replay})
            g.reset()
    return result


def native(shape: str, variant: str, out: Path, sizes: list[int]) -> dict[str, Any]:
    tag = f"{shape} {variant} native"
    torch.cuda.init()
    foundry.set_allocation_region(BASE, REGION)
    model, ids, pos = _build(shape)
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
    t0 = time.perf_counter()
    for bs, (g, hidden) in graphs.items():
        g.save(out / f"bs{bs}.json", output_tensors=hidden, archive_dir=archive)
    manifest = foundry.save_graph_manifest(archive)
    save_s = time.perf_counter() - t0
    _progress(tag, f"saved {len(graphs)} graphs in {save_s:.2f} s")

    _fill(model, ids, pos, 1)
    ordered = {bs: graphs[bs] for bs in sizes}
    digests = _digests(ordered)
    _fill(model, ids, pos, 1)
    deterministic = _digests(ordered) == digests  # the same replays again: is native itself repeatable?
    latency = {str(bs): _latency_us(g) for bs, (g, _) in ordered.items()}
    # The same native execs launched directly (no torch replay bookkeeping), to separate the two.
    direct = {str(bs): _latency_us(_DirectLaunch(g)) for bs, (g, _) in ordered.items()}
    nodes = {str(bs): _saved_nodes(out / f"bs{bs}.json") for bs in sizes}
    same_process = _same_process_latency(ordered, out)
    return {
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


def _saved_nodes(json_path: Path) -> int:
    return int(json.loads(json_path.read_text())["stats"]["nodes"])


def load(shape: str, variant: str, out: Path, sizes: list[int]) -> dict[str, Any]:
    tag = f"{shape} {variant} load"
    torch.cuda.init()
    foundry.set_allocation_region(BASE, REGION)
    model, ids, pos = _build(shape)
    torch.cuda.synchronize()
    paths = [out / f"bs{bs}.json" for bs in sizes]
    t0 = time.perf_counter()
    pending = foundry.CUDAGraph.start_graph_builds(paths, num_threads=8, defer_dedicated=True)
    start_s = time.perf_counter() - t0
    first = foundry.CUDAGraph.finish_one_graph_load(pending, 0)
    load_first_s = time.perf_counter() - t0
    loaded = foundry.CUDAGraph.finish_graph_loads(pending)
    load_all_s = time.perf_counter() - t0
    first[0].replay()
    torch.cuda.synchronize()
    first_step_s = _since_spawn()
    _progress(tag, f"{len(paths)} graphs replayable {load_all_s * 1000:.0f} ms after start_graph_builds")
    graphs = {bs: loaded[i] for i, bs in enumerate(sizes)}

    _fill(model, ids, pos, 1)
    digests_template = _digests(graphs)
    latency_template = {str(bs): _latency_us(g) for bs, (g, _) in graphs.items()}
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
    digests = _digests(graphs)
    latency = {str(bs): _latency_us(g) for bs, (g, _) in graphs.items()}
    t1 = time.perf_counter()
    outputs = [tensor_at(o) for h in pending.handles for o in h.source.meta.outputs]
    tensor_at_us = (time.perf_counter() - t1) / max(1, len(outputs)) * 1e6
    build_probe = _probe_build(pending)
    driver_probe = _probe_driver(pending)
    process_probe = _probe_process(model, ids, pos, graphs) if variant == "eager" else {}
    return {
        "trace": pending.phases.spans,
        "tensor_at_us": tensor_at_us,
        "build_probe": build_probe,
        "driver_probe": driver_probe,
        "process_probe_us": process_probe,
        "start_s": start_s,
        "load_first_s": load_first_s,
        "load_all_s": load_all_s,
        "dedicated_s": dedicated_s,
        "first_step_s": first_step_s,
        "timings": pending.timings,
        "groups": len(pending.groups),
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
