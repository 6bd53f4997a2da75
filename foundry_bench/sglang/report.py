"""The SGLang benchmark's document as tables and a plot: start-up per run with the graphs' capture or restore,
LOAD's start-up by phase, the targets, and decode/prefill parity. ``write_report(doc, OUT)`` writes OUT.json,
OUT.txt (also printed) and OUT.png (where matplotlib is installed); ``python -m foundry_bench.sglang.report
OUT.json`` renders a committed document again."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from foundry.probe import table
from foundry_bench.serving.fresh import fresh_lines
from foundry_bench.serving.memory import memory_profile_lines
from foundry_bench.serving.ranks import arrival_lines, restore_lines
from foundry_bench.serving.report import (
    LABELS,
    LOADS,
    answer_group_lines,
    fmt,
    foundry_rows,
    foundry_seconds,
    native_env_lines,
    parity_lines,
    phase_steps,
    plot_startup,
    render_again,
    repeat_lines,
    sameness,
    slower_steps_line,
    start_up_check_lines,
    step_table,
    wrap,
    write_files,
)
from foundry_bench.serving.stacks import stack_lines
from foundry_bench.serving.starts import start_figures, start_lines, starts_of
from foundry_bench.serving.written import written_lines

from .logsteps import STEPS
from .targets import targets

__all__ = ["log_step_lines", "render", "scheduler_less_graphs", "segments", "target_lines", "write_report"]

STARTS_FIGURES = [
    ("ready_wall_s", "ready s"),
    ("engine_init_s", "Engine() s"),
    ("health_s", "/health s"),
    ("scheduler_s", "scheduler s"),
    ("first_request_s", "1st token s"),
]

PHASES = {
    "distributed": "torch.distributed (region set)",
    "load_model": "weights (graphs start building)",
    "memory_pool": "KV cache pool",
    "attention_backends": "attention backends",
    "prefill_buffers": "prefill runner's buffers",
    "prefill_graphs": "prefill graphs installed (Foundry)",
    "decode_buffers": "decode runner's buffers",
    "decode_graphs": "decode graphs installed (Foundry)",
}


def _foundry(mode: str, r: dict[str, Any]) -> float | None:
    """Foundry's own seconds: LOAD's images and graphs; SAVE's writing of the archive."""
    if mode in LOADS:
        return foundry_seconds(r)
    return ((r.get("plugin") or {}).get("timings") or {}).get("save_s") if mode == "save" else None


def startup_rows(doc: dict[str, Any]) -> list[list[str]]:
    out = []
    for mode, label in LABELS.items():
        r = doc["results"].get(mode)
        if r is None:
            continue
        c = doc["compare"].get(mode, {})
        same = sameness(mode, c, r)
        if "skipped" in r:
            out.append([label, *["-"] * 8, f"skipped: {r['skipped']}"])
            continue
        out.append([
            label, fmt(r.get("import_s")), fmt(r.get("engine_init_s", r.get("health_s"))), fmt(r.get("weights_s")),
            fmt(r.get("prefill_graphs_s")), fmt(r.get("decode_graphs_s")), fmt(scheduler_less_graphs(r)),
            fmt(_foundry(mode, r)),
            fmt(r.get("first_request_s"), 3), same if "error" not in r else "NO (failed)",
        ])  # fmt: skip
    return out


def log_step_lines(doc: dict[str, Any]) -> list[str]:
    """SGLang's start-up step by step from its log (logsteps.py), native warm beside LOAD (and SAVE): the steps
    LOAD leaves to SGLang must take no longer than native's; nothing where the logs had no such timestamps."""
    # native warm and LOAD: medians where --starts asked for more starts of each
    runs = {"native": start_figures(doc, "native"), "save": doc["results"].get("save") or {},
            "load": start_figures(doc, "load")}  # fmt: skip
    modes = [m for m in ("native", "save", "load") if any(k.startswith("step_") for k in runs[m])]
    if "native" not in modes or "load" not in modes:
        return []
    rows, diffs = [], []
    for key, _, _, what in STEPS:
        got = [runs[m].get(f"step_{key}_s") for m in modes]
        if all(v is None for v in got):
            continue
        native, load = got[0], got[-1]
        diff = load - native if native is not None and load is not None else None
        rows.append([what, *(fmt(v, 3) for v in got), fmt(diff, 3) if diff is not None else "-"])
        diffs.append((what, diff))
    labels = {"native": "native warm s", "save": "SAVE s", "load": "LOAD s"}
    starts = starts_of(runs["native"], runs["load"])
    each = f" (native warm and LOAD: medians of {starts} starts each)" if starts > 1 else ""
    title = f"SGLang's start-up by its own log (millisecond timestamps), step by step{each}:"
    return ["", title, table(["step", *(labels[m] for m in modes), "LOAD - native s"], rows), slower_steps_line(diffs)]


def scheduler_less_graphs(r: dict[str, Any]) -> float | None:
    """The scheduler process's own start-up (SGLang's ``scheduler_e2e``) less its two graph phases: what LOAD
    must not make slower than native's, since the graphs are all it replaces."""
    total = r.get("scheduler_s")
    if not isinstance(total, int | float):
        return None
    return float(total) - float(r.get("prefill_graphs_s") or 0.0) - float(r.get("decode_graphs_s") or 0.0)


_AGAINST = {"native": "native's", "native_cold": "native cold's", "save": "SAVE's (no native run)"}


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "not measured"}[met]


def target_lines(doc: dict[str, Any]) -> list[str]:
    t = doc.get("targets") or targets(doc)
    restore, startup, decode = t["restore"], t["startup"], t["decode"]
    what = "/health" if doc["config"]["api"] == "serve" else "Engine()"
    return [
        "",
        "Targets:",
        f"- capture replaced by a restore >= {restore['target']:.0f}x faster: prefill + decode graphs natively "
        f"{fmt(restore['native_cold_capture_s'])} s cold, {fmt(restore['native_capture_s'])} s warm; Foundry's "
        f"restore {fmt(restore['load_foundry_s'], 3)} s: {fmt(restore['speedup'], 1)}x against "
        f"{restore['against']} ({fmt(restore['speedup_warm'], 1)}x against warm): {_verdict(restore['met'])}",
        f"- {what} under LOAD <= {startup['target']}x native's with warm caches: {fmt(startup['load_s'])} s / "
        f"{fmt(startup['native_s'])} s = {fmt(startup['ratio'], 3)}: {_verdict(startup['met'])}",
        *start_up_check_lines(t, what, t.get("starts", 1)),
        f"- decode tokens/s within {decode['target'] * 100:.0f}% of native: worst paired ratio "
        f"{fmt(decode['worst_paired_ratio'], 4)} (batch {decode['worst_batch']}): {_verdict(decode['met'])}",
        f"- greedy tokens and top-{doc['config'].get('logprobs', 0)} logprobs identical to "
        f"{_AGAINST.get(t['tokens'].get('against', 'native'), t['tokens'].get('against'))} at batch "
        f"{', '.join(map(str, doc['config']['batches']))}: "
        f"{_verdict(t['tokens']['met'])}",
    ]


HEADER = ["run", "import s", "Engine() s", "weights s", "prefill graphs s", "decode graphs s",
          "scheduler less graphs s", "Foundry s", "1st token s", "tokens, logprobs identical"]  # fmt: skip


def render(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    first: dict[str, Any] = next((r for r in doc["results"].values() if "sglang" in r), {})
    gpu = (doc.get("machine") or {}).get("gpu", "")
    api = "sglang.Engine" if cfg["api"] == "engine" else "launch_server"
    graphs = "SGLang's default CUDA graph sizes" if not cfg.get("engine_args") else f"engine args {cfg['engine_args']}"
    header = HEADER if cfg["api"] == "engine" else [*HEADER[:2], "to /health s", *HEADER[3:]]
    lines = [
        f"SGLang {first.get('sglang', '0.5.17')} {api}, {cfg['shape']} (dummy weights), triton attention, {graphs}, "
        f"{gpu}; greedy, {cfg['max_tokens']} tokens at batch sizes ({', '.join(map(str, cfg['batches']))})",
        *native_env_lines(cfg),
        "",
        table(header, startup_rows(doc)),
        *wrap(
            "Engine(): its construction in a process that has imported SGLang (the server: process start to /health "
            "answering 200); graphs: SGLang's logged capture of the prefill (breakable) and decode (full) graphs, "
            "under LOAD Foundry's hand-over; Foundry: SAVE's writing of the archive, LOAD's own seconds (kernel "
            "images, graph builds started and waited for; not the CUDA context, SGLang's own, which LOAD makes first); "
            "scheduler less graphs: SGLang's logged start-up of its scheduler process (scheduler_e2e) without the "
            "two graph phases, the part LOAD leaves to SGLang; 1st token: a batch-1 request of one token right after "
            "ready."
        ),
    ]
    lines += log_step_lines(doc)
    load = doc["results"].get("load")
    if load:
        first_steps = [("imports (torch, sglang)", load.get("import_s"))]
        lines += step_table(phase_steps(load, first_steps, PHASES), "LOAD's start-up, seconds from process start:")
        lines += ["", "Foundry's own seconds in LOAD, on the scheduler's thread:",
                  table(["step", "s"], foundry_rows(load, "SGLang"))]  # fmt: skip
    lines += start_lines(doc, LABELS, STARTS_FIGURES)
    lines += target_lines(doc)
    lines += restore_lines(doc, "scheduler_s", "the scheduler's start-up (scheduler_e2e)")
    lines += arrival_lines(doc)
    lines += parity_lines(doc)
    lines += fresh_lines(doc["results"], LABELS)
    lines += written_lines(doc["results"], LABELS)
    lines += memory_profile_lines(doc, LABELS)
    lines += answer_group_lines(doc["results"], LABELS)
    lines += repeat_lines(doc["results"], LABELS)
    lines += stack_lines(doc["results"], LABELS)
    if doc.get("wall_s") is not None:
        lines += ["", f"The benchmark took {doc['wall_s']:.0f} s."]
    return "\n".join(lines) + "\n"


def segments(mode: str, r: dict[str, Any]) -> list[tuple[str, float]]:
    """A run's time to ready in parts: imports (and whatever of start-up is not named), the weights, the CUDA
    graphs (captured, or Foundry's restore), Foundry's own work outside them."""
    total = r.get("ready_wall_s")
    if not isinstance(total, int | float):
        return []
    graphs = (r.get("prefill_graphs_s") or 0.0) + (r.get("decode_graphs_s") or 0.0)
    timings = (r.get("plugin") or {}).get("timings") or {}
    if mode in LOADS:  # graphs_ready_s is within SGLang's logged graph phase
        own = sum(float(timings.get(k, 0.0)) for k in ("load_modules_s", "start_graph_builds_s"))
    else:
        own = float(timings.get("save_s", 0.0))
    imports = float(r.get("import_s") or 0.0)
    weights = float(r.get("weights_s") or 0.0)
    return [
        ("imports", imports),
        ("weights", weights),
        ("CUDA graphs: capture, or Foundry's restore", graphs),
        ("Foundry: SAVE's writing, LOAD's images and builds started", own),
        ("rest of start-up (processes, KV cache, warm-up, server)", max(0.0, total - imports - weights - graphs - own)),
    ]


def plot(doc: dict[str, Any], path: Path) -> bool:
    return plot_startup(doc, path, LABELS, segments, "Engine()" if doc["config"]["api"] == "engine" else "/health")


def write_report(doc: dict[str, Any], out: Path) -> str:
    """OUT.json, OUT.txt and OUT.png; returns the text (also printed)."""
    return write_files(doc, out, render, plot)


def _judged_again(doc: dict[str, Any], out: Path) -> str:
    """A committed document's report with its targets judged by this checkout's rules, not the ones it was
    written with."""
    return write_report({**doc, "targets": targets(doc)}, out)


if __name__ == "__main__":
    render_again(sys.argv[1:], _judged_again)
