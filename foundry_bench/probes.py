"""Measurements beside the cold-start benchmark's headline figures, each answering one question about
where time goes: is a loaded exec as fast as the native one in the same process, does graph building
run in parallel, what does the driver charge per image and kernel, does the process itself change
replay speed. Used by foundry_bench.worker; results land in cold-start.json. They look inside LOAD only
through the probe surface, foundry.probe."""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import foundry
from foundry import probe
from foundry.probe import Loader

from .model import QwenDecoder

PROBE_SIZES = (1, 8, 64, 256, 512)
PROBE_ROUNDS = 15

__all__ = [
    "GcTime",
    "first_replays",
    "probe_build",
    "probe_driver",
    "probe_exec_update",
    "probe_process",
    "probe_switch_penalty",
    "same_process_latency",
    "time_interleaved",
]


class GcTime:
    """The collector's runs while the block runs, by generation, and the seconds they took (a process that
    compiled holds millions of objects, and one full run walks them all)."""

    def __init__(self) -> None:
        self.runs = [0, 0, 0]
        self.seconds = 0.0
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.runs[info["generation"]] += 1

    def __enter__(self) -> GcTime:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def report(self) -> dict[str, Any]:
        return {"runs_by_generation": self.runs, "seconds": self.seconds, "objects": len(gc.get_objects())}


def same_process_latency(graphs: dict[int, tuple[Any, torch.Tensor]], out: Path) -> dict[str, dict[str, float]]:
    """Each native graph against an exec that LOAD's code builds from its archived record, in this one
    process, interleaved round by round: the same memory, GPU state and clocks for both, so the ratio
    is the exec's alone. (Across two processes, replay speed differs by up to ~10% in either direction
    for the same exec; the LOAD worker's process probe shows it.)"""
    stream = torch.cuda.current_stream().cuda_stream
    result: dict[str, dict[str, float]] = {}
    for bs, (g, _) in graphs.items():
        rebuilt = probe.rebuild(out / "archive" / f"bs{bs}.json")
        result[str(bs)] = time_interleaved({"native": g.replay, "loaded": lambda e=rebuilt: e.launch(stream)})
        rebuilt.close()
    return result


def time_interleaved(runs: dict[str, Any], rounds: int = PROBE_ROUNDS) -> dict[str, float]:
    """Median replay time per entry in us (warm; CUDA events; one replay per measurement), measured
    round by round in turn."""
    for fn in runs.values():
        for _ in range(3):
            fn()
    times: dict[str, list[Any]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            times[name].append((a, b))
    torch.cuda.synchronize()
    return {k: statistics.median(a.elapsed_time(b) for a, b in v) * 1000 for k, v in times.items()}


def first_replays(graphs: dict[int, tuple[Any, torch.Tensor]], pending: Loader) -> dict[str, dict[str, Any]]:
    """Each graph's very first replay after LOAD (CUDA events, one at a time, synchronized): what a server's
    first step at each batch size costs. Per batch size: ``us`` the first replay; ``host_us`` the time
    ``replay()`` took on the host (a switch of the shared exec is host work, and the GPU waits for it
    inside the events); ``again_us`` a second replay right after (the same exec, now launched before:
    ``us - again_us`` is what a first launch costs); ``exec`` how it replayed (probe.next_launch)."""
    out = {}
    for i, (bs, (g, _)) in enumerate(graphs.items()):
        how = probe.next_launch(pending, i)
        row: dict[str, Any] = {"exec": how}
        for key in ("us", "again_us"):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            t0 = time.perf_counter()
            g.replay()
            host = time.perf_counter() - t0
            b.record()
            torch.cuda.synchronize()
            row[key] = a.elapsed_time(b) * 1000
            if key == "us":
                row["host_us"] = host * 1e6
        out[str(bs)] = row
    return out


def probe_exec_update(pending: Loader, groups: int = 3) -> list[dict[str, Any]]:
    """Does a shared exec switched to a member replay slower than the member's own exec, and do uploading
    the switched exec again (cuGraphUpload) or updating it whole (cuGraphExecUpdate) remove that? For the
    largest groups with members: medians in us, interleaved, and what building and instantiating the
    member's own exec costs per node."""
    stream = torch.cuda.current_stream().cuda_stream
    out = []
    for pair in probe.exec_pairs(pending, groups):
        runs = {
            "own": lambda e=pair.own: e.launch(stream),
            "switched": lambda e=pair.switched: e.launch(stream),
        }
        row: dict[str, Any] = {
            "nodes": pair.nodes,
            "own_build_instantiate_us_per_node": pair.own_build_s / pair.nodes * 1e6,
        }
        row.update(time_interleaved(runs))
        pair.upload_switched(stream)
        torch.cuda.synchronize()
        row["switched_uploaded"] = time_interleaved({"x": runs["switched"]})["x"]
        row.update(pair.switch_times())
        try:
            t0 = time.perf_counter()
            pair.update_switched_whole()
            row["exec_update_us"] = (time.perf_counter() - t0) * 1e6
            row["switched_whole_update"] = time_interleaved({"x": runs["switched"]})["x"]
        except Exception as exc:  # a measurement: reported, not raised
            row["exec_update_error"] = str(exc)
        out.append(row)
        pair.close()
    return out


def probe_switch_penalty(pending: Loader, roundtrips: int = 4) -> list[dict[str, Any]]:
    """Why does a member replay slower on its template's exec switched to it than on an exec of its own?
    For every member: both execs' medians in us (interleaved) and how its varying nodes differ from the
    template's. For the first ``roundtrips`` members also: the same execs instantiated for launch from the
    device; fresh own execs with some nodes switched away and back before launch (``_round_trips``); the
    member's own exec after node updates that change nothing (a tenth of its varying nodes, then all); and
    the switch the other way: the member's own exec switched node by node to the template's values
    (against a fresh exec of the template) and back (against the template's exec switched to the member).
    Each state replayed is a whole graph's values, never a mix."""
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    for i, pair in enumerate(probe.member_pairs(pending)):
        row: dict[str, Any] = {"nodes": pair.nodes, "name": pair.member.source.meta.name}
        row.update(pair.override_kinds())
        own, switched = (lambda e=pair.own: e.launch(stream)), (lambda e=pair.switched: e.launch(stream))
        row.update(time_interleaved({"own": own, "switched": switched}, rounds=9))
        if i < roundtrips:
            row.update(_device_launch(pair, stream, own, switched))
            row["round_trips"] = _round_trips(pair, stream, own)
            for fraction in (0.1, 1.0):  # updates that change nothing, on the member's own exec
                row[f"unchanged_updates_{fraction}"] = pair.update_own_unchanged(fraction)
                row[f"own_after_unchanged_{fraction}"] = time_interleaved({"x": own}, rounds=9)["x"]
            template = pair.template_exec()
            pair.switch_own(to_template=True)
            both = time_interleaved({"template": lambda t=template: t.launch(stream), "own_as_template": own}, rounds=9)
            row.update(both)
            pair.switch_own(to_template=False)
            row.update({f"{k}_after": v for k, v in time_interleaved({"own": own, "switched": switched}, 9).items()})
            template.close()
        rows.append(row)
        pair.close()
    return rows


def _round_trips(pair: probe.ExecPair, stream: int, own: Any) -> dict[str, dict[str, float]]:
    """Fresh execs of the member's own graph, some of whose nodes were switched to the template's values and
    back before their first launch, against ``own``: does the slowdown grow with the nodes changed, and
    which changes leave it (one node, a tenth, the nodes whose arguments alone differ, those whose grid
    differs, all)."""
    changes = pair.node_changes()
    order = sorted(changes)
    subsets = {
        "first": order[:1],
        "tenth": order[: len(order) // 10],
        "args_only": [i for i in order if not changes[i]],
        "grid": [i for i in order if "grid" in changes[i]],
        "all": order,
    }
    out = {}
    for name, indices in subsets.items():
        e = pair.own_round_trip(indices)
        t = time_interleaved({"own": own, "round_trip": lambda e=e: e.launch(stream)}, rounds=9)
        out[name] = {"nodes": len(indices), **t}
        e.close()
    return out


def _device_launch(pair: probe.ExecPair, stream: int, own: Any, switched: Any) -> dict[str, Any]:
    """The same three execs instantiated for launch from the device too (their launch data kept on the
    device), launched from the host: the template's fresh, the member's own, the template's switched to the
    member and uploaded; interleaved with the plain ``own`` and ``switched``."""
    made: list[probe.ProbeExec] = []
    try:
        made.append(pair.template_exec(device_launch=True))
        made.append(pair.own_device_launch())
        made.append(pair.switched_device_launch(stream))
    except Exception as exc:  # a measurement: reported, not raised
        for e in made:
            e.close()
        return {"device_launch_error": str(exc)[:300]}
    runs = {"own": own, "switched": switched}
    for name, e in zip(("dl_template", "dl_own", "dl_switched"), made, strict=True):
        runs[name] = lambda e=e: e.launch(stream)
    out = {f"{k}_vs_dl": v for k, v in time_interleaved(runs, rounds=9).items()}
    for e in made:
        e.close()
    return out


def probe_build(pending: Loader) -> dict[str, dict[str, float]]:
    """Builds and instantiates every group's template again with 1, 4 and 8 threads: does the driver
    let graph building and instantiation run in parallel, and what does each cost per node?"""
    out = {}
    for threads in (1, 4, 8):
        t0 = time.perf_counter()
        nodes, res = probe.template_builds(pending, threads)
        wall = time.perf_counter() - t0
        out[str(threads)] = {
            "wall_s": wall,
            "build_thread_s": sum(r[0] for r in res),
            "instantiate_thread_s": sum(r[1] for r in res),
            "build_us_per_node": sum(r[0] for r in res) / nodes * 1e6,
            "instantiate_us_per_node": sum(r[1] for r in res) / nodes * 1e6,
        }
    return out


def probe_driver(pending: Loader) -> dict[str, float]:
    """What the driver charges for LOAD's image work: every image the graphs use is loaded once more
    (under another registry key) and each of its kernels looked up, timed; and how fast this machine
    hashes (SHA-256 is what LOAD checks images and records with)."""
    import hashlib
    import zlib

    images = probe.images_used(pending)
    out = {"images": len(images), "image_bytes": sum(i.size for i in images), "kernels": 0.0}
    load_s = first_get_s = 0.0
    blobs = []
    for image in images:
        blob, loaded_s, lookup_s = probe.load_again(image)
        blobs.append(blob)
        out["kernels"] += len(image.kernels)
        load_s += loaded_s
        first_get_s += lookup_s
    blob = b"".join(blobs)
    out.update(library_load_s=load_s, kernel_first_get_s=first_get_s)
    for threads in (1, 4):  # start-up splits the images over LIMITS.image_loaders threads
        load_wall, lookup_wall = probe.load_again_together(images, threads, f"probe{threads}")
        out.update({f"load_{threads}_threads_s": load_wall, f"lookup_{threads}_threads_s": lookup_wall})
    out.update(probe_module_api(blobs, [list(i.kernels) for i in images]))
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


def probe_module_api(blobs: list[bytes], names: list[list[str]]) -> dict[str, float]:
    """The same images through cuModuleLoadData + cuModuleGetFunction (the driver directly), to compare
    with the library API LOAD uses."""
    from foundry.errors import DriverError
    from foundry.probe import module_function, module_load

    module_s = get_s = 0.0
    for blob, kernel_names in zip(blobs, names, strict=True):
        t0 = time.perf_counter()
        try:
            mod, _keep = module_load(blob)
        except DriverError as exc:
            return {"module_api_error": float(exc.code or -1)}
        t1 = time.perf_counter()
        for name in kernel_names:
            module_function(mod, name)
        module_s += t1 - t0
        get_s += time.perf_counter() - t1
    return {"module_load_s": module_s, "module_get_function_s": get_s}


def probe_process(
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
            result[str(bs)] = time_interleaved({"loaded": graphs[bs][0].replay, "native_here": g.replay})
            g.reset()
    return result


def rss_by_mapping() -> dict[str, int]:
    """Resident kB of each of this process's mappings (/proc/self/smaps), keyed by address range,
    permissions and name: a diff of two snapshots shows which mappings a phase faulted in."""
    out: dict[str, int] = {}
    key = ""
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=5)
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                key = " ".join([head[0], head[1], head[5].strip() if len(head) > 5 else "[anon]"])
            elif head[0] == "Rss:":
                out[key] = int(head[1])
    return out


def rss_growth(before: dict[str, int], after: dict[str, int], top: int = 12) -> list[tuple[str, int]]:
    grown = [(k, kb - before.get(k, 0)) for k, kb in after.items()]
    return sorted((g for g in grown if g[1] > 0), key=lambda g: -g[1])[:top]
