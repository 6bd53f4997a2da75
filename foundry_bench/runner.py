"""`foundry bench`: native warm-up + capture against Foundry's LOAD, side by side, in one run.

For each model shape and variant, a native process warms up, captures the decode graphs for every
batch size and saves them; a fresh process then loads them. The report (JSON, a table and a plot)
compares cold start, replay latency per batch size and outputs, as measured in this run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from foundry.probe import table

__all__ = ["run_bench", "summarize"]


def _worker(mode: str, shape: str, variant: str, out: Path, sizes: list[int] | None, log: Path) -> dict[str, Any]:
    from foundry.probe import preload_env

    env = preload_env()
    env["FOUNDRY_BENCH_SPAWN"] = repr(time.time())
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = [sys.executable, "-m", "foundry_bench.worker", mode, shape, variant, str(out)]
    if sizes:
        cmd.append(",".join(map(str, sizes)))
    with log.open("a") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.write(line)
            if line.startswith("["):
                print("  " + line.rstrip(), flush=True)
        code = proc.wait()
    if code != 0:
        tail = log.read_text().splitlines()[-25:]
        raise RuntimeError(f"{mode} worker for {shape}/{variant} failed ({code}); see {log}:\n" + "\n".join(tail))
    return dict(json.loads((out / f"{mode}.json").read_text()))


def summarize(shape: str, variant: str, native: dict[str, Any], loaded: dict[str, Any]) -> dict[str, Any]:
    """One row of the report: the cold-start, SAVE, LOAD and replay figures, from the two workers' raw results."""
    sizes = list(native["latency_us"])
    # Across the two processes replay speed differs by the process, not the exec: on the H200 every
    # graph, native ones captured there included, replayed 5-11% faster in the LOAD process at small
    # batch sizes (the LOAD worker's process probe). So the headline ratio compares the native exec
    # with one LOAD builds from the archive in the same process, interleaved; the cross-process ratios
    # are kept beside it.
    cross = {bs: loaded["latency_us"][bs] / native["latency_us"][bs] for bs in sizes}
    same = native.get("same_process_us") or {}
    ratio = {bs: v["loaded"] / v["native"] for bs, v in same.items()} or cross
    ratio_t = {bs: loaded["latency_template_us"][bs] / native["latency_us"][bs] for bs in sizes}
    shared_over_own = {bs: loaded["latency_template_us"][bs] / loaded["latency_us"][bs] for bs in sizes}
    nodes = sum(native["nodes"].values())
    row: dict[str, Any] = {
        "shape": shape,
        "variant": variant,
        "graphs": len(sizes),
        "nodes": nodes,
        "native_warmup_capture_s": native["native_warmup_capture_s"],
        "native_warmup_s": native["native_warmup_s"],
        "native_capture_s": native["native_capture_s"],
        "save_s": native["save_s"],
        "save_over_capture": native["save_s"] / native["native_capture_s"],
        "save_phases_s": native.get("save_phases_s"),
        "save_phases_beside_capture_s": native.get("save_phases_beside_capture_s"),
        "save_gc": native.get("save_gc"),
        "save_phase_faults": native.get("save_phase_faults"),
        "save_phase_counts": native.get("save_phase_counts"),  # what SAVE's phases did (bytes read, ...)
        "load_modules_s": loaded.get("modules_s", 0.0),  # load_cuda_modules_and_libraries, before the model
        "load_first_s": loaded["load_first_s"],
        "load_all_s": loaded["load_all_s"],
        "load_total_s": loaded.get("modules_s", 0.0) + loaded["load_all_s"],
        "dedicated_s": loaded["dedicated_s"],
        "speedup": native["native_warmup_capture_s"] / loaded["load_all_s"],
        "speedup_total": native["native_warmup_capture_s"] / (loaded.get("modules_s", 0.0) + loaded["load_all_s"]),
        "restore_us_per_node": loaded["load_all_s"] / nodes * 1e6,
        "first_step_native_s": native["first_step_s"],
        "first_step_load_s": loaded["first_step_s"],
        "replay_ratio_max": max(ratio.values()),
        "replay_ratio_median": statistics.median(ratio.values()),
        "replay_ratio_max_cross_process": max(cross.values()),
        "replay_ratio_median_cross_process": statistics.median(cross.values()),
        "replay_ratio_max_template": max(ratio_t.values()),
        "shared_over_own_exec_max": max(shared_over_own.values()),
        "replay_ratio_median_template": statistics.median(ratio_t.values()),
        "switch_us_median": statistics.median(loaded["switch_us"].values()) if loaded["switch_us"] else None,
        "bit_identical": loaded["digests"] == native["digests"],
        "bit_identical_template": loaded["digests_template"] == native["digests"],
        "native_deterministic": native.get("deterministic"),
        "mismatched_bs": [bs for bs in sizes if loaded["digests"][bs] != native["digests"][bs]],
        "mismatched_bs_template": [bs for bs in sizes if loaded["digests_template"][bs] != native["digests"][bs]],
        "replay_ratio_max_vs_direct": max(loaded["latency_us"][bs] / native["latency_direct_us"][bs] for bs in sizes),
        "replay_ratio_median_vs_direct": statistics.median(
            loaded["latency_us"][bs] / native["latency_direct_us"][bs] for bs in sizes
        ),
        "archive_bytes": native["archive_bytes"],
        "groups": loaded["groups"],
        "grouping": native.get("groups"),
        "load_timings": loaded["timings"],
        "load_minor_faults": loaded.get("load_minor_faults"),  # page faults between start and all replayable
        "latency_us": {
            bs: [native["latency_us"][bs], loaded["latency_template_us"][bs], loaded["latency_us"][bs]] for bs in sizes
        },
        "latency_direct_us": native["latency_direct_us"],
        "same_process_us": native.get("same_process_us"),
        "driver_probe": loaded.get("driver_probe"),
        "process_probe_us": loaded.get("process_probe_us"),
        "build_probe": loaded.get("build_probe"),
        "tensor_at_us": loaded.get("tensor_at_us"),
        "exec_update_probe": loaded.get("exec_update_probe"),
        "varying_differences": loaded.get("varying_differences"),
        "switch_penalty": loaded.get("switch_penalty"),
        "first_replays": loaded.get("first_replay"),  # by batch size: how each ran, its time and host time
    }
    row["cold_path"] = cold_path(row, native, loaded)
    return row


def cold_path(row: dict[str, Any], native: dict[str, Any], loaded: dict[str, Any]) -> dict[str, Any]:
    """Where the LOAD process's time goes from its start to its first decode step, beside the floor (what
    the same process needs anyway: Python and torch imported, CUDA's context, the model's own tensors).
    ``row`` is the rest of ``summarize``'s row, whose figures this section repeats in its order."""
    cold, native_cold = loaded.get("cold") or {}, native.get("cold") or {}
    floor = sum(cold.get(k, 0.0) for k in ("import_s", "context_s", "model_s"))
    first_replay = loaded.get("first_replay_us") or {}
    over_native = {bs: us / native["latency_us"][bs] for bs, us in first_replay.items() if bs in native["latency_us"]}
    return {
        "import_s": cold.get("import_s"),
        "context_s": cold.get("context_s"),
        "modules_s": row["load_modules_s"],  # on the caller's thread
        "modules_background_s": (cold.get("startup_phases_s") or {}).get("background", 0.0),  # beside the model
        "startup_phases_s": cold.get("startup_phases_s"),  # each start-up step's seconds, summed over its threads
        "startup_spans": cold.get("startup_spans"),
        "model_s": cold.get("model_s"),
        "startup_wait_s": row["load_timings"].get("startup_wait_s", 0.0),
        "load_all_s": row["load_all_s"],
        "modules_and_load_s": row["load_total_s"],
        "load_us_per_node": row["restore_us_per_node"],
        "own_execs_s": row["dedicated_s"],
        "shared_over_own_max": row["shared_over_own_exec_max"],
        "first_replay_over_native_max": max(over_native.values()) if over_native else None,
        "first_replay_over_native_median": statistics.median(over_native.values()) if over_native else None,
        **first_replay_breakdown(loaded.get("first_replay") or {}, native["latency_us"]),
        **own_first_replays(loaded.get("first_replay_own") or {}, native["latency_us"]),
        "floor_s": floor,
        "first_step_load_s": row["first_step_load_s"],
        "over_floor_s": row["first_step_load_s"] - floor,
        "first_step_native_s": row["first_step_native_s"],
        "native_floor_s": sum(native_cold.get(k, 0.0) for k in ("import_s", "context_s", "model_s")),
        "save_over_capture": row["save_over_capture"],
    }


def first_replay_breakdown(detail: dict[str, dict[str, Any]], native_us: dict[str, float]) -> dict[str, Any]:
    """What the first replays after LOAD were made of (foundry_bench.probes.first_replays): the largest
    ratio to native's warm median among graphs that replayed on an exec of their own or on the shared
    exec as it stood (no switch), and among those switched; the same for the second replay right after
    (no first-launch cost left); and the slowest graph, whole. The reference is the native process's warm
    median: natively, every graph has replayed once at capture before a server's first step."""
    rows = {bs: r for bs, r in detail.items() if bs in native_us}
    if not rows:
        return {}

    def worst(key: str, kinds: tuple[str, ...]) -> float | None:
        ratios = [r[key] / native_us[bs] for bs, r in rows.items() if r.get("exec") in kinds]
        return max(ratios) if ratios else None

    bs, slowest = max(rows.items(), key=lambda item: item[1]["us"] / native_us[item[0]])
    return {
        "first_replay_over_native_max_unswitched": worst("us", ("own", "shared")),
        "first_replay_over_native_max_switched": worst("us", ("switch",)),
        "second_replay_over_native_max": worst("again_us", ("own", "shared", "switch")),
        "first_replay_execs": {k: sum(r.get("exec") == k for r in rows.values()) for k in ("own", "shared", "switch")},
        "first_replay_slowest": {"bs": bs, "native_us": native_us[bs], **slowest},
    }


def own_first_replays(detail: dict[str, dict[str, Any]], native_us: dict[str, float]) -> dict[str, Any]:
    """Each graph's first replay once every graph has its own exec (foundry_bench.probes.first_replays after
    ``wait_all``): what a program's first step at each batch size costs once LOAD's background builds are
    done, the state a server is in from ``own_execs_s`` after LOAD on. Each such exec was built, instantiated
    and uploaded in the background and never launched before (a template whose shared exec was never
    switched keeps it, launched already). Ratios to native's warm median, as ``first_replay_breakdown``."""
    ratios = {bs: r["us"] / native_us[bs] for bs, r in detail.items() if bs in native_us}
    if not ratios:
        return {}
    again = [r["again_us"] / native_us[bs] for bs, r in detail.items() if bs in native_us]
    bs = max(ratios, key=ratios.__getitem__)
    return {
        "first_replay_own_over_native_max": ratios[bs],
        "first_replay_own_over_native_median": statistics.median(ratios.values()),
        "second_replay_own_over_native_max": max(again),
        "first_replay_own_slowest": {"bs": bs, "native_us": native_us[bs], **detail[bs]},
    }


def _cold_table(rows: list[dict[str, Any]]) -> str:
    heads = ["model", "variant", "modules s", "(background)", "LOAD all s", "together s", "us/node", "own execs s",
             "shared/own max", "1st replay own/native max", "1st replay before own/native max", "floor s",
             "first step LOAD s", "over floor s", "first step native s", "SAVE/capture"]  # fmt: skip
    body = []
    for r in rows:
        c = r.get("cold_path") or {}
        if not c:
            continue

        def f(key: str, fmt: str = ".3f", c: dict[str, Any] = c) -> str:
            value = c.get(key)
            return "-" if value is None else format(value, fmt)

        body.append([r["shape"], r["variant"], f("modules_s"), f("modules_background_s"), f("load_all_s"),
                     f("modules_and_load_s"), f("load_us_per_node", ".2f"), f("own_execs_s"),
                     f("shared_over_own_max"), f("first_replay_own_over_native_max"),
                     f("first_replay_over_native_max"), f("floor_s", ".2f"),
                     f("first_step_load_s", ".2f"), f("over_floor_s", ".2f"), f("first_step_native_s", ".2f"),
                     f("save_over_capture", ".2f")])  # fmt: skip
    return table(heads, body)


def _table(rows: list[dict[str, Any]]) -> str:
    heads = ["model", "variant", "graphs", "nodes", "native s", "SAVE s", "modules s", "LOAD first s", "LOAD all s",
             "speedup", "us/node", "replay max", "replay max (tmpl)", "identical", "archive MiB"]  # fmt: skip
    body = []
    for r in rows:
        identical = "yes" if r["bit_identical"] and r["bit_identical_template"] else "NO"
        body.append([
            r["shape"], r["variant"], r["graphs"], r["nodes"], f"{r['native_warmup_capture_s']:.2f}",
            f"{r['save_s']:.2f}", f"{r.get('load_modules_s', 0.0):.3f}", f"{r['load_first_s']:.3f}",
            f"{r['load_all_s']:.3f}", f"{r['speedup']:.0f}x",
            f"{r['restore_us_per_node']:.2f}", f"{r['replay_ratio_max']:.3f}", f"{r['replay_ratio_max_template']:.3f}",
            identical, f"{r['archive_bytes'] / 2**20:.1f}",
        ])  # fmt: skip
    return table(heads, body)


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (matplotlib not installed: no plot)")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    labels = [f"{r['shape']}\n{r['variant']}" for r in rows]
    x = range(len(rows))
    left.bar([i - 0.2 for i in x], [r["native_warmup_capture_s"] for r in rows], 0.4, label="native warm-up + capture")
    left.bar([i + 0.2 for i in x], [r["load_all_s"] for r in rows], 0.4, label="Foundry LOAD (all replayable)")
    left.set_yscale("log")
    top = max([r["native_warmup_capture_s"] for r in rows] + [1.0])
    left.set_ylim(top=top * 20)  # room for the legend above the bars
    for i, r in enumerate(rows):
        left.annotate(f"{r['speedup']:.0f}x", (i + 0.2, r["load_all_s"]), ha="center", va="bottom", fontsize=8)
    left.set_xticks(list(x), labels)
    left.set_ylabel("seconds (log)")
    left.set_title("Cold start")
    left.legend(loc="upper left", fontsize=8)
    # The headline ratio: native exec vs the exec LOAD builds, in one process, interleaved (the
    # cross-process ratio mixes in the process's own speed; see summarize).
    for r in rows:
        same = r.get("same_process_us") or {}
        pairs = [(int(b), v["loaded"] / v["native"]) for b, v in same.items()] or [
            (int(b), v[2] / v[0]) for b, v in r["latency_us"].items()
        ]
        right.plot([p[0] for p in pairs], [p[1] for p in pairs], label=f"{r['shape']} {r['variant']}")
    right.axhline(1.01, color="grey", linestyle="--", linewidth=0.8)
    right.axhline(0.99, color="grey", linestyle="--", linewidth=0.8)
    right.set_xlabel("batch size")
    right.set_ylabel("loaded / native replay latency (same process)")
    right.set_title("Steady-state replay (own execs)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_bench(out: Path, shapes: list[str], variants: list[str], sizes: list[int] | None) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "bench-workers.log"
    log.write_text("")
    rows = []
    machine: dict[str, Any] = {}
    for shape in shapes:
        for variant in variants:
            work = Path(os.environ.get("FOUNDRY_BENCH_WORK", "/tmp/foundry-bench")) / f"{shape}-{variant}"
            if work.exists():
                import shutil

                shutil.rmtree(work)
            print(f"== {shape} / {variant}", flush=True)
            native = _worker("native", shape, variant, work, sizes, log)
            machine = native.get("machine", machine)
            loaded = _worker("load", shape, variant, work, sizes, log)
            row = summarize(shape, variant, native, loaded)
            rows.append(row)
            print(_table([row]), flush=True)
            # Written after every variant, so that a run cut short still reports what it measured.
            doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine, "results": rows}
            (out / "cold-start.json").write_text(json.dumps(doc, indent=1))
            (out / "cold-start.txt").write_text(_table(rows) + "\n\ncold path\n" + _cold_table(rows) + "\n")
    _plot(rows, out / "cold-start.png")
    print("\n" + _table(rows) + "\n\ncold path\n" + _cold_table(rows))
    return rows
